package inject

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// quiet is the default Config with the backlog sysctls declined: no warning about them.
var quiet = Config{BacklogSysctls: ptrTo(false)}

func podWith(annotations string) []byte {
	return []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {" + annotations + "}\n" +
		"spec:\n  containers:\n  - name: app\n    image: app:1\n    ports: [{containerPort: 20880}]\n")
}

// TestAnnotationsGetTheSettingsRanges: values the sidecar would refuse at start (and crash-loop on)
// are refused at injection, with the sidecar's own range in the message, naming the annotation.
func TestAnnotationsGetTheSettingsRanges(t *testing.T) {
	for _, tc := range []struct{ ann, want string }{
		{`stormgate.io/upstream-conns: "100"`, "stormgate.io/upstream-conns (flag --upstream-conns): upstream.connections: 100 is too large"},
		{`stormgate.io/upstream-conns: "100"`, "between 1 and 64"},
		{`stormgate.io/log-level: verbose`, "stormgate.io/log-level (flag --log-level): log.level"},
		{`stormgate.io/log-level: verbose`, "debug, info, warn or error"},
		{`stormgate.io/xds-address: "control-plane"`, "stormgate.io/xds-address (flag --xds)"},
		{`stormgate.io/xds-address: "cp:0"`, `port "0"`},
		{`stormgate.io/xds-ca-secret: ca`, "there is no control plane"},
		{`stormgate.io/xds-address: "cp:18000", stormgate.io/xds-cert-secret: client`, "needs annotation stormgate.io/xds-ca-secret"},
		{`stormgate.io/xds-address: "cp:18000", stormgate.io/xds-ca-secret: "Not_A_Name"`, "is not a Secret name"},
		{`stormgate.io/memory-limit: 32Mi, stormgate.io/memory-request: 16Mi`, "below 64Mi"},
	} {
		_, _, err := Manifest(podWith(tc.ann), Config{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant one containing %q", tc.ann, err, tc.want)
		}
	}
	// In range: injected.
	for _, ann := range []string{`stormgate.io/upstream-conns: "64"`, `stormgate.io/log-level: warn`} {
		if _, res, err := Manifest(podWith(ann), Config{}); err != nil || res[0].Action != ActionInjected {
			t.Errorf("%s: %v %v", ann, res, err)
		}
	}
	// The same checks hold for the flags.
	if err := (Config{UpstreamConns: 65}).Validate(); err == nil || !strings.Contains(err.Error(), "upstream.connections") {
		t.Errorf("--upstream-conns 65: %v", err)
	}
	if err := (Config{LogLevel: "trace"}).Validate(); err == nil || !strings.Contains(err.Error(), "log.level") {
		t.Errorf("--log-level trace: %v", err)
	}
}

// TestTLSToControlPlane: the Secrets are mounted read-only into the Stormgate container only, the
// flags point at the mounted files, and plaintext to a control plane off the pod draws a warning.
func TestTLSToControlPlane(t *testing.T) {
	out, res, err := Manifest(podWith(`stormgate.io/xds-address: "cp.example:18000", stormgate.io/xds-ca-secret: cp-ca, stormgate.io/xds-cert-secret: sidecar-tls`), quiet)
	if err != nil || len(res[0].Warnings) != 0 {
		t.Fatalf("%v %v", res, err)
	}
	pod := decodeAll(t, out)[0]
	side := pod.spec.Containers[len(pod.spec.Containers)-1]
	args := strings.Join(side.Args, " ")
	for _, want := range []string{"--xds cp.example:18000", "--xds-ca /etc/stormgate/xds-ca/ca.crt",
		"--xds-cert /etc/stormgate/xds-cert/tls.crt --xds-key /etc/stormgate/xds-cert/tls.key"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	readOnly := map[string]bool{}
	for _, m := range side.VolumeMounts {
		readOnly[m.Name] = m.ReadOnly
	}
	if len(side.VolumeMounts) != 3 || !readOnly[XDSCAVolume] || !readOnly[XDSCertVolume] {
		t.Errorf("mounts %+v, want the two Secrets read-only (and the upgrade volume)", side.VolumeMounts)
	}
	if app := pod.spec.Containers[0]; len(app.VolumeMounts) != 0 {
		t.Errorf("the application container got mounts %+v", app.VolumeMounts)
	}
	secrets := map[string]string{}
	for _, v := range pod.spec.Volumes {
		if v.Name == UpgradeVolume {
			continue
		}
		secrets[v.Name] = v.Secret.SecretName
		if *v.Secret.DefaultMode != 0o444 || v.Secret.Optional == nil || *v.Secret.Optional {
			t.Errorf("volume %s: %+v", v.Name, v.Secret)
		}
	}
	if secrets[XDSCAVolume] != "cp-ca" || secrets[XDSCertVolume] != "sidecar-tls" {
		t.Errorf("volumes %v", secrets)
	}

	for _, tc := range []struct {
		addr string
		warn bool
	}{{"cp.example:18000", true}, {"198.18.0.1:18000", true}, {"127.0.0.1:18000", false}, {"[::1]:18000", false}, {"localhost:18000", false}} {
		_, res, err := Manifest(podWith(`stormgate.io/xds-address: "`+tc.addr+`"`), quiet)
		if err != nil {
			t.Fatal(err)
		}
		warned := len(res[0].Warnings) == 1 && strings.Contains(res[0].Warnings[0], "plaintext")
		if warned != tc.warn {
			t.Errorf("%s: warnings %q, want a plaintext warning: %v", tc.addr, res[0].Warnings, tc.warn)
		}
	}
}

// TestUpgradeVolume: every injected sidecar gets a writable, size-bounded emptyDir at UpgradeDir
// (the only writable path in its container) for `sidecar upgrade --binary`; the application
// container does not see it; a pod that already uses the name is refused, not overwritten.
func TestUpgradeVolume(t *testing.T) {
	out, _, err := Manifest(podWith(``), Config{})
	if err != nil {
		t.Fatal(err)
	}
	pod := decodeAll(t, out)[0]
	side := pod.spec.Containers[len(pod.spec.Containers)-1]
	if len(side.VolumeMounts) != 1 || side.VolumeMounts[0].Name != UpgradeVolume ||
		side.VolumeMounts[0].MountPath != UpgradeDir || side.VolumeMounts[0].ReadOnly {
		t.Errorf("sidecar mounts %+v, want %s writable at %s", side.VolumeMounts, UpgradeVolume, UpgradeDir)
	}
	if app := pod.spec.Containers[0]; len(app.VolumeMounts) != 0 {
		t.Errorf("the application container got mounts %+v", app.VolumeMounts)
	}
	if len(pod.spec.Volumes) != 1 || pod.spec.Volumes[0].EmptyDir == nil ||
		pod.spec.Volumes[0].EmptyDir.SizeLimit == nil || pod.spec.Volumes[0].EmptyDir.SizeLimit.String() != UpgradeSizeLimit {
		t.Errorf("volumes %+v, want one emptyDir of %s", pod.spec.Volumes, UpgradeSizeLimit)
	}

	// Injecting the output again changes nothing (the volume is Stormgate's, taken out and put back).
	again, res, err := Manifest(out, Config{})
	if err != nil || !bytes.Equal(again, out) {
		t.Errorf("re-injection: %v %v, output changed: %v", res, err, !bytes.Equal(again, out))
	}

	clash := bytes.Replace(podWith(``), []byte("spec:\n"), []byte("spec:\n  volumes: [{ name: stormgate-bin, emptyDir: {} }]\n"), 1)
	if _, _, err := Manifest(clash, Config{}); err == nil || !strings.Contains(err.Error(), `"stormgate-bin"`) {
		t.Errorf("a pod with its own stormgate-bin volume: %v, want a refusal naming it", err)
	}
}

func TestGoMemLimitLeavesSocketHeadroom(t *testing.T) {
	for _, tc := range []struct{ limit, want string }{
		{"1Gi", "896MiB"}, {"512Mi", "416MiB"}, {"128Mi", "64MiB"}, {"8Gi", "7168MiB"}, {"1000M", "875000000"},
	} {
		if got := goMemLimit(resource.MustParse(tc.limit)); got != tc.want {
			t.Errorf("limit %s: GOMEMLIMIT %s, want %s", tc.limit, got, tc.want)
		}
	}
	out, _, err := Manifest(podWith(`stormgate.io/memory-limit: 2Gi`), Config{})
	if err != nil {
		t.Fatal(err)
	}
	side := decodeAll(t, out)[0].spec.Containers[1]
	for _, e := range side.Env {
		if e.Name == "GOMEMLIMIT" && e.Value != "1792MiB" {
			t.Errorf("GOMEMLIMIT %q for a 2Gi limit", e.Value)
		}
	}
	// No memory limit: no GOMEMLIMIT.
	out, _, err = Manifest(podWith(""), Config{Limits: corev1.ResourceList{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range decodeAll(t, out)[0].spec.Containers[1].Env {
		if e.Name == "GOMEMLIMIT" {
			t.Errorf("GOMEMLIMIT %q without a memory limit", e.Value)
		}
	}
}

// TestOneImageByVersion: the default image is the injecting binary's own version, used for the init
// container too; an image annotation moves both unless the init image is named.
func TestOneImageByVersion(t *testing.T) {
	images := func(ann string, cfg Config) (init, side, injected string) {
		t.Helper()
		out, _, err := Manifest(podWith(ann), cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := decodeAll(t, out)[0]
		return d.spec.InitContainers[0].Image, d.spec.Containers[1].Image, d.meta.Annotations[AnnotationInjected]
	}
	if i, s, v := images("", Config{Version: "1.4.2"}); i != "stormgate/sidecar:1.4.2" || s != i || v != "1.4.2" {
		t.Errorf("defaults: init %s sidecar %s injected %s", i, s, v)
	}
	if i, s, _ := images(`stormgate.io/image: "reg.example/sg:2"`, Config{Version: "1.4.2"}); i != "reg.example/sg:2" || s != i {
		t.Errorf("image annotation: init %s sidecar %s", i, s)
	}
	if i, s, _ := images(`stormgate.io/init-image: "reg.example/init:3"`, Config{Image: "reg.example/sg:2"}); i != "reg.example/init:3" || s != "reg.example/sg:2" {
		t.Errorf("init-image annotation: init %s sidecar %s", i, s)
	}
}
