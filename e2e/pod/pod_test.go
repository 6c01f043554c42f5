package pod

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/stormgate/stormgate/build/image"
	"github.com/stormgate/stormgate/e2e/testcerts"
	"github.com/stormgate/stormgate/inject"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/xds/controlplane"
)

const (
	providerPort  = 20880
	proxyPort     = inject.DefaultProxyPort
	metricsPort   = inject.DefaultMetricsPort
	pushedUpConns = 2 // upstream.connections served by the control plane (the default is 4)
	consumers     = 6 // half over IPv4 (the published port), half over IPv6 (the pod's address)
	callsEach     = 10
)

// TestInjectedPodInPodman is issue 13's pod test. Images: the sidecar image and a provider image
// (`stormbench provider`), each one static binary on an empty base, built without a Docker daemon as
// `make image` builds them. Manifest: a provider Deployment with a tcpSocket liveness probe on its
// Dubbo port and mTLS to a control plane, through the real `sidecar inject`. Pod: `podman kube play`
// on a network in 198.18.0.0/15 + 2001:db8::/32, ports published on 127.0.0.1. Then, from outside
// the pod: consumers over IPv4 and IPv6 are answered through Stormgate (its metrics count them; the
// provider sees only Stormgate's loopback connections, as many as the control plane said over mTLS);
// /healthz, /readyz and the rewritten probe answer on the probe port, and the probe fails once the
// provider is stopped; the sidecar runs as 1337 with a read-only root and no capabilities, the init
// container with NET_ADMIN only; `podman kube down` and removing the network leave no container,
// rule or network behind.
func TestInjectedPodInPodman(t *testing.T) {
	pm := requirePodman(t)
	start := time.Now()
	defer func() { t.Logf("podman steps:\n  %s", strings.Join(pm.logs, "\n  ")) }()
	id := randomID()
	version := "podtest-" + id
	work := t.TempDir()
	arch := runtime.GOARCH

	// Podman builds its pause image the first time a pod starts, and kube play may create its default
	// network even when told to use another: remove them afterwards if it was us.
	imagesBefore, networksBefore := pm.images(), pm.networks()
	t.Cleanup(func() {
		for _, n := range pm.networks() {
			if n == "podman-default-kube-network" && !slices.Contains(networksBefore, n) {
				if _, err := pm.try("network", "rm", n); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			}
		}
		for _, img := range pm.images() {
			if strings.HasPrefix(img, "localhost/podman-pause:") && !slices.Contains(imagesBefore, img) {
				if _, err := pm.try("rmi", img); err != nil {
					t.Errorf("cleanup: %v", err)
				}
			}
		}
	})

	// --- Images -------------------------------------------------------------------------------
	// Two builds, as make build does: the full binary runs `sidecar inject` here, and the data-plane
	// build (-tags dataplane) goes into the sidecar image.
	buildStatic(t, work, "./cmd/sidecar", version)
	dataplaneDir := filepath.Join(work, "dataplane")
	if err := os.MkdirAll(dataplaneDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sidecarBin := buildStatic(t, dataplaneDir, "./cmd/sidecar", version, "dataplane")
	benchBin := buildStatic(t, work, "./cmd/stormbench", version)
	sidecarImage := "stormgate-podtest/sidecar:" + id
	providerImage := "stormgate-podtest/provider:" + id
	pm.buildImage(image.Sidecar(sidecarBin, sidecarImage, version, arch, time.Time{}))
	pm.buildImage(image.Spec{Name: providerImage, Binary: benchBin, BinaryPath: "/stormbench", User: "1000:1000", Arch: arch})
	if out := pm.run("run", "--rm", "--network", "none", "localhost/"+sidecarImage, "version"); !strings.Contains(out, "stormgate "+version) {
		t.Fatalf("podman run IMAGE version printed %q, want the version %s", out, version)
	}
	if _, err := pm.try("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", "localhost/"+sidecarImage, "-c", "true"); err == nil ||
		!strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("the image has a shell (or failed otherwise): %v", err)
	}
	if _, err := pm.try("run", "--rm", "--network", "none", "localhost/"+sidecarImage, "control-plane"); err == nil ||
		!strings.Contains(err.Error(), "stormgate/control image") {
		t.Errorf("control-plane in the sidecar image: %v; want the data-plane build's directions", err)
	}
	size := pm.run("image", "inspect", "--format", "{{.Size}}", "localhost/"+sidecarImage)
	t.Logf("sidecar image %s: %s bytes (one static binary)", sidecarImage, strings.TrimSpace(size))

	// --- Network: the test's own, in 198.18.0.0/15 and 2001:db8::/32 -----------------------------
	// A random /24: another test's network (or one a killed run left) may hold one, so a taken subnet is
	// passed over, up to 8 times.
	var octet int
	var subnet4, subnet6 string
	network := "sgpod-" + id
	rulesBefore := hostRules(t)
	for try := 1; ; try++ {
		octet = 64 + rand.IntN(128)
		subnet4, subnet6 = fmt.Sprintf("198.18.%d.0/24", octet), fmt.Sprintf("2001:db8:%x::/64", octet)
		_, err := pm.try("network", "create", "--disable-dns", "--subnet", subnet4, "--subnet", subnet6, network)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "already used") || try == 8 {
			t.Fatalf("podman network create: %v", err)
		}
		t.Logf("subnet %s is taken (%v); trying another", subnet4, err)
	}
	gateway4 := fmt.Sprintf("198.18.%d.1", octet)
	networkRemoved := false
	t.Cleanup(func() {
		if !networkRemoved {
			if _, err := pm.try("network", "rm", "--force", network); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})

	// --- Control plane over mTLS, on the bridge's gateway address ----------------------------------
	pki := filepath.Join(work, "pki")
	caDir, certDir := filepath.Join(pki, "xds-ca"), filepath.Join(pki, "xds-cert")
	for _, d := range []string{caDir, certDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca := testcerts.NewCA(t, caDir, "ca")
	srvCert, srvKey := ca.Server(t, pki, "control-plane", gateway4)
	cliCert, cliKey := ca.Client(t, pki, "sidecar")
	// The files as the Secret volumes would hold them (ca.crt; tls.crt and tls.key).
	for from, to := range map[string]string{cliCert: filepath.Join(certDir, "tls.crt"), cliKey: filepath.Join(certDir, "tls.key")} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	cpAddr := startControlPlane(t, work, gateway4, srvCert, srvKey, ca.Path)

	// --- The manifest, injected by the real CLI ---------------------------------------------------
	deployment := "order-provider-" + id
	podName := deployment + "-pod-0"
	providerHostPort, metricsHostPort := freePort(t), freePort(t)
	plain := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: 1
  selector:
    matchLabels: {app: order-provider}
  template:
    metadata:
      labels: {app: order-provider}
      annotations:
        stormgate.io/xds-address: "%[2]s"
        stormgate.io/xds-ca-secret: stormgate-xds-ca
        stormgate.io/xds-cert-secret: stormgate-xds-client
        # podman 4.3's kube play ignores pod sysctls (somaxconn stays 4096 with them), so the pod
        # cannot show them applied; inject's tests check what the manifest says.
        stormgate.io/backlog-sysctls: "false"
    spec:
      containers:
      - name: provider
        image: localhost/%[3]s
        args: [provider, --listen, "0.0.0.0:%[4]d", --log-level, info]
        ports:
        - {name: dubbo, containerPort: %[4]d, hostPort: %[5]d, hostIP: 127.0.0.1}
        livenessProbe:
          tcpSocket: {port: dubbo}
          periodSeconds: 10
`, deployment, cpAddr, providerImage, providerPort, providerHostPort)
	plainPath := filepath.Join(work, "provider.yaml")
	if err := os.WriteFile(plainPath, []byte(plain), 0o644); err != nil {
		t.Fatal(err)
	}
	// STORMGATE_POD_INJECT names a program run instead of `sidecar inject`, with the same arguments:
	// k8s/ TestStoredPodRunsInPodman sets it to k8s/cmd/kube-inject, so that the pod played here is the
	// one a real API server stored after the Helm chart's webhook injected it.
	injector, injectArgs := filepath.Join(work, "sidecar"), []string{"inject", "-f", plainPath, "--image", "localhost/" + sidecarImage}
	if p := os.Getenv("STORMGATE_POD_INJECT"); p != "" {
		injector, injectArgs = p, injectArgs[1:]
		t.Logf("injecting with %s (STORMGATE_POD_INJECT)", p)
	}
	cmd := exec.Command(injector, injectArgs...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	injected, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", injector, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "injected") || strings.Contains(stderr.String(), "warning") {
		t.Errorf("%s reported:\n%s", injector, stderr.String())
	}
	t.Logf("%s: %s", filepath.Base(injector), strings.TrimSpace(stderr.String()))
	played := adaptForPodman(t, injected, pki, metricsHostPort)
	playedPath := filepath.Join(work, "provider.injected.yaml")
	if err := os.WriteFile(playedPath, played, 0o644); err != nil {
		t.Fatal(err)
	}

	// --- The pod ------------------------------------------------------------------------------------
	podDown := false
	down := func() {
		if !podDown {
			podDown = true
			if _, err := pm.try("kube", "down", playedPath); err != nil {
				t.Errorf("podman kube down: %v", err)
			}
		}
	}
	t.Cleanup(down) // registered first: a play that fails half way leaves a pod too
	pm.run("kube", "play", "--build=false", "--network", network, playedPath)
	ctrSidecar, ctrProvider, ctrInit := podName+"-"+inject.ContainerName, podName+"-provider", podName+"-"+inject.InitContainerName
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range []string{ctrInit, ctrSidecar, ctrProvider} {
				out, _ := pm.try("logs", c)
				t.Logf("--- podman logs %s:\n%s", c, out)
			}
		}
	})

	metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsHostPort)
	metricsURL := "http://" + metricsAddr
	if !poll(60*time.Second, func() bool { code, _ := httpGet(metricsURL + "/readyz"); return code == 200 }) {
		code, body := httpGet(metricsURL + "/readyz")
		t.Fatalf("/readyz on the probe port: %d %q after 60 s (the sidecar gets ready once it has its settings over mTLS)", code, body)
	}
	t.Logf("pod ready %v after the start of the test", time.Since(start).Round(time.Millisecond))
	if code, body := httpGet(metricsURL + "/healthz"); code != 200 {
		t.Errorf("/healthz: %d %q", code, body)
	}

	// The init container: done, exit 0, NET_ADMIN only, and what it installed is in the pod.
	if code := pm.inspect(ctrInit, "{{.State.ExitCode}}"); code != "0" {
		t.Errorf("init container exit code %s", code)
	}
	var initCaps []string
	jsonField(t, pm.inspect(ctrInit, "{{json .EffectiveCaps}}"), &initCaps)
	if len(initCaps) != 1 || initCaps[0] != "CAP_NET_ADMIN" {
		t.Errorf("init container capabilities %v, want [CAP_NET_ADMIN]", initCaps)
	}
	initLog := pm.run("logs", ctrInit)
	sidecarPID := pm.inspect(ctrSidecar, "{{.State.Pid}}")
	inPod := func(argv ...string) string {
		t.Helper()
		out, err := exec.Command("nsenter", append([]string{"-t", sidecarPID, "-n"}, argv...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("in the pod's network namespace: %s: %v\n%s", strings.Join(argv, " "), err, out)
		}
		return string(out)
	}
	dry, err := exec.Command(filepath.Join(work, "sidecar"), "iptables", "--inbound-ports", strconv.Itoa(providerPort),
		"--proxy-port", strconv.Itoa(proxyPort), "--dry-run", "--ipv6").Output()
	if err != nil {
		t.Fatal(err)
	}
	if ruleset := inPod("nft", "list", "table", "inet", "stormgate"); ruleset != string(dry) || !strings.Contains(initLog, ruleset) {
		t.Errorf("pod's table:\n%s\ninit container's log:\n%s\nsidecar iptables --dry-run:\n%s", ruleset, initLog, dry)
	}

	// The sidecar: user 1337, no capabilities, read-only root file system.
	st := procStatus(t, sidecarPID)
	if uid := strings.Fields(st["Uid"]); len(uid) == 0 || uid[0] != "1337" || st["CapEff"] != "0000000000000000" || st["CapPrm"] != "0000000000000000" {
		t.Errorf("sidecar process: Uid %q CapEff %q CapPrm %q; want 1337 and no capabilities", st["Uid"], st["CapEff"], st["CapPrm"])
	}
	if ro := pm.inspect(ctrSidecar, "{{.HostConfig.ReadonlyRootfs}}"); ro != "true" {
		t.Errorf("sidecar ReadonlyRootfs %s", ro)
	}

	// --- Consumers, from outside the pod: IPv4 through the published port, IPv6 to the pod -----------
	var addr6 string
	infra := strings.TrimSpace(pm.run("pod", "inspect", "--format", "{{.InfraContainerID}}", podName))
	for _, f := range strings.Fields(pm.inspect(infra, "{{range .NetworkSettings.Networks}}{{.GlobalIPv6Address}} {{end}}")) {
		if a, err := netip.ParseAddr(f); err == nil && a.Is6() {
			addr6 = netip.AddrPortFrom(a, providerPort).String()
		}
	}
	if addr6 == "" {
		t.Fatalf("the pod has no IPv6 address on %s", network)
	}
	targets := []string{}
	for i := range consumers {
		if i%2 == 0 {
			targets = append(targets, fmt.Sprintf("127.0.0.1:%d", providerHostPort))
		} else {
			targets = append(targets, addr6)
		}
	}
	clients := make([]*peer.Client, len(targets))
	for i, target := range targets {
		var c *peer.Client
		if !poll(20*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			c, err = peer.Dial(ctx, target, 0)
			return err == nil
		}) {
			t.Fatalf("consumer %d: dial %s: %v", i, target, err)
		}
		defer c.Close()
		clients[i] = c
		for j := range callsEach {
			arg := fmt.Sprintf("pod-%s-%d-%d", id, i, j)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := c.Call(ctx, int64(j+1), "org.stormgate.Greeter", "echo", arg)
			cancel()
			if err != nil || resp.Status != 20 || resp.Value != arg {
				t.Fatalf("consumer %d (%s) call %d: status %d value %q err %v", i, target, j, resp.Status, resp.Value, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hb, err := c.Heartbeat(ctx, 1000)
		cancel()
		if err != nil || hb.Status != 20 {
			t.Fatalf("consumer %d heartbeat: status %d err %v", i, hb.Status, err)
		}
	}

	// Stormgate's view: every consumer and call went through it, on the control plane's connection count.
	ms := metrics(t, metricsAddr)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"stormgate_downstream_accepted_total", nil, consumers},
		{"stormgate_downstream_connections", nil, consumers},
		{"stormgate_requests_total", nil, consumers * callsEach},
		{"stormgate_responses_total", nil, consumers * callsEach},
		{"stormgate_heartbeats_answered_total", []string{`side="downstream"`}, consumers},
		{"stormgate_upstream_connections", nil, pushedUpConns},
		{"stormgate_xds_connected", nil, 1},
		{"stormgate_listen_queue_limit", nil, 4096}, // a pod's own somaxconn caps the 65535 backlog
	} {
		if got := ms.Sum(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if acks := ms.Sum("stormgate_xds_updates_total", `result="ack"`); acks < 1 {
		t.Errorf("no settings applied from the control plane over mTLS (acks %v)", acks)
	}
	// The provider's view: only Stormgate's connections, from loopback.
	providerPID := pm.inspect(ctrProvider, "{{.State.Pid}}")
	ss, err := exec.Command("nsenter", "-t", providerPID, "-n", "ss", "-Htn", "state", "established",
		fmt.Sprintf("( sport = :%d )", providerPort)).Output()
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for line := range strings.Lines(string(ss)) {
		if f := strings.Fields(line); len(f) >= 4 {
			peers = append(peers, f[3])
		}
	}
	if len(peers) != pushedUpConns {
		t.Errorf("provider connections %v, want Stormgate's %d", peers, pushedUpConns)
	}
	for _, p := range peers {
		if ap, err := netip.ParseAddrPort(p); err != nil || !ap.Addr().Unmap().IsLoopback() {
			t.Errorf("provider connection from %s: only Stormgate's loopback connections should reach it", p)
		}
	}

	// --- In-place upgrade through the injected volume (docs/operations.md, "On Kubernetes") -----------
	// The procedure as documented, `kubectl exec -i ... -- /sidecar upgrade --binary - < FILE`, here
	// with podman exec -i: the new binary streamed into stormgate-bin (the sidecar's only writable
	// path; the image has no shell or tar), checked against its SHA-256, and handed over to: same
	// process, same connections, the new version serving them.
	nextVersion := version + "-next"
	nextDir := filepath.Join(work, "next")
	if err := os.MkdirAll(nextDir, 0o755); err != nil {
		t.Fatal(err)
	}
	nextBin := buildStatic(t, nextDir, "./cmd/sidecar", nextVersion, "dataplane")
	nextSum := sha256.Sum256(nextBin)
	upOut := pm.runIn(bytes.NewReader(nextBin), "exec", "-i", ctrSidecar, "/sidecar", "upgrade", "--binary", "-",
		"--sha256", hex.EncodeToString(nextSum[:]))
	if !strings.Contains(upOut, "into "+inject.UpgradeDir+"/sidecar") {
		t.Errorf("upgrade --binary - did not write into %s:\n%s", inject.UpgradeDir, upOut)
	}
	t.Logf("sidecar upgrade in the pod:\n%s", upOut)
	if pid := pm.inspect(ctrSidecar, "{{.State.Pid}}"); pid != sidecarPID {
		t.Errorf("sidecar PID %s after the upgrade, want %s (the same process)", pid, sidecarPID)
	}
	if restarts := pm.inspect(ctrSidecar, "{{.RestartCount}}"); restarts != "0" {
		t.Errorf("sidecar container restarted %s times during the upgrade", restarts)
	}
	if out := pm.run("exec", ctrSidecar, "/sidecar", "version", "--admin", "127.0.0.1:15000"); !strings.Contains(out, nextVersion) {
		t.Errorf("the running sidecar's version after the upgrade: %q, want %s", out, nextVersion)
	}
	for i, c := range clients {
		arg := fmt.Sprintf("pod-%s-%d-after-upgrade", id, i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := c.Call(ctx, int64(callsEach+1), "org.stormgate.Greeter", "echo", arg)
		cancel()
		if err != nil || resp.Status != 20 || resp.Value != arg {
			t.Errorf("consumer %d, same connection, after the upgrade: status %d value %q err %v", i, resp.Status, resp.Value, err)
		}
	}
	ms = metrics(t, metricsAddr)
	if got := ms.Sum("stormgate_downstream_connections"); got != consumers {
		t.Errorf("consumer connections after the upgrade: %v, want the same %d", got, consumers)
	}

	// The rewritten liveness probe tests the provider: it passes now, and fails once the provider is
	// stopped (the original tcpSocket probe would have been answered by Stormgate).
	probePath := "/app-health/provider/livez"
	if code, body := httpGet(metricsURL + probePath); code != 200 {
		t.Errorf("%s with the provider up: %d %q", probePath, code, body)
	}
	pm.run("stop", "--time", "10", ctrProvider)
	if !poll(10*time.Second, func() bool { code, _ := httpGet(metricsURL + probePath); return code == 503 }) {
		code, body := httpGet(metricsURL + probePath)
		t.Errorf("%s with the provider stopped: %d %q, want 503", probePath, code, body)
	}

	// --- Teardown: nothing left behind ----------------------------------------------------------------
	infraPID := pm.inspect(infra, "{{.State.Pid}}")
	netnsLink, _ := os.Readlink("/proc/" + infraPID + "/ns/net")
	down()
	if _, err := pm.try("pod", "exists", podName); err == nil {
		t.Errorf("pod %s still exists after podman kube down", podName)
	}
	if left := strings.TrimSpace(pm.run("ps", "--all", "--filter", "name="+podName, "--format", "{{.Names}}")); left != "" {
		t.Errorf("containers left after podman kube down: %s", left)
	}
	if left := strings.TrimSpace(pm.run("volume", "ls", "--format", "{{.Name}}")); left != "" {
		t.Logf("podman volumes present after kube down (not necessarily ours): %s", left)
	}
	// The pod's processes are gone once kube down returns, but the kernel may take a moment
	// to let the last of them go (on a loaded machine one test run saw it still held).
	if netnsLink != "" && !poll(15*time.Second, func() bool { return len(netnsHolders(netnsLink)) == 0 }) {
		t.Errorf("the pod's network namespace %s is still in use 15 s after kube down, by %v", netnsLink, netnsHolders(netnsLink))
	}
	bridge := strings.TrimSpace(pm.run("network", "inspect", "--format", "{{.NetworkInterface}}", network))
	pm.run("network", "rm", network)
	networkRemoved = true
	if _, err := net.InterfaceByName(bridge); err == nil {
		t.Errorf("bridge %s still exists after the network was removed", bridge)
	}
	after := hostRules(t)
	for _, needle := range []string{strings.TrimSuffix(subnet4, "0/24"), strings.TrimSuffix(subnet6, ":/64"), bridge,
		fmt.Sprintf("dport %d", providerHostPort), fmt.Sprintf("dport %d", metricsHostPort)} {
		for line := range strings.Lines(after) {
			if strings.Contains(line, needle) {
				t.Errorf("host rule left behind (mentions %s): %s", needle, strings.TrimSpace(line))
			}
		}
	}
	if after != rulesBefore {
		t.Logf("host ruleset differs from before the test, none of it about this pod (netavark keeps its empty base chains once created):\n%s", after)
	}
	t.Logf("pod test took %v", time.Since(start).Round(time.Millisecond))
}

// adaptForPodman makes the injected manifest playable by podman 4.3, changing only what podman needs
// and Kubernetes does not (each for a reason that is podman's, not the manifest's):
//   - io.podman.annotations.init.container.type: always on the Deployment: podman 4.3 races removing a
//     finished once-init container ("cannot remove container ... as it is running").
//   - restartPolicy OnFailure: podman 4.3 applies the pod's Always to init containers and restarts the
//     finished one, stalling the pod's start for 25 s (containers/podman#16343).
//   - a hostPort on 127.0.0.1 for the metrics port: podman publishes every containerPort on 0.0.0.0
//     otherwise; the test reads /metrics, /healthz, /readyz and /app-health through it.
//   - the Secret volumes become hostPath volumes of the test's PEM files in the same layout: podman 4.3.1
//     writes Secret data base64-encoded into the volume.
//   - POD_NAMESPACE from the downward API becomes the value "default": podman 4.3 supports no
//     fieldRef to metadata.namespace (the Kubernetes default namespace is what the API server gives).
func adaptForPodman(t *testing.T, injected []byte, pki string, metricsHostPort int) []byte {
	t.Helper()
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(injected, &d); err != nil {
		t.Fatalf("injected manifest: %v\n%s", err, injected)
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations["io.podman.annotations.init.container.type"] = "always"
	spec := &d.Spec.Template.Spec
	spec.RestartPolicy = corev1.RestartPolicyOnFailure
	found := false
	for i := range spec.Containers {
		for j := range spec.Containers[i].Ports {
			if p := &spec.Containers[i].Ports[j]; p.Name == inject.MetricsPortName {
				p.HostPort, p.HostIP, found = int32(metricsHostPort), "127.0.0.1", true
			}
		}
	}
	if !found {
		t.Fatalf("injected manifest has no %s port", inject.MetricsPortName)
	}
	for i := range spec.Containers {
		for j := range spec.Containers[i].Env {
			if e := &spec.Containers[i].Env[j]; e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
				e.ValueFrom, e.Value = nil, "default"
			}
		}
	}
	dirs := map[string]string{inject.XDSCAVolume: "xds-ca", inject.XDSCertVolume: "xds-cert"}
	secrets := 0
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if dir, ok := dirs[v.Name]; ok && v.Secret != nil {
			v.VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
				Path: filepath.Join(pki, dir), Type: ptr(corev1.HostPathDirectory)}}
			secrets++
		}
	}
	if secrets != 2 {
		t.Fatalf("injected manifest has %d of the 2 TLS Secret volumes", secrets)
	}
	out, err := yaml.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startControlPlane serves the reference control plane with mutual TLS on host:0 (the network's
// gateway, which exists only once the pod's first container is up: bound with IP_FREEBIND) and returns
// its address. It serves upstream.connections: 2, which the test then finds in the pod.
func startControlPlane(t *testing.T, work, host, cert, key, clientCA string) string {
	t.Helper()
	cfg := filepath.Join(work, "control-plane.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("default:\n  upstream: {connections: %d}\n", pushedUpConns)), 0o644); err != nil {
		t.Fatal(err)
	}
	creds, err := controlplane.Credentials(controlplane.TLSConfig{Cert: cert, Key: key, ClientCA: clientCA})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(controlplane.Config{Config: cfg, ServerOptions: []grpc.ServerOption{creds}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1) }); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp4", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control plane: %v", err)
		}
	})
	return ln.Addr().String()
}

// netnsHolders lists the processes ("pid comm") that live in the network namespace link names
// ("net:[4026532...]").
func netnsHolders(link string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, p := range procs {
		if l, err := os.Readlink(p); err == nil && l == link {
			dir := filepath.Dir(filepath.Dir(p))
			comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
			out = append(out, filepath.Base(dir)+" "+strings.TrimSpace(string(comm)))
		}
	}
	return out
}

func ptr[T any](v T) *T { return &v }
