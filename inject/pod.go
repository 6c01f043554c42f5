package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/stormgate/stormgate/transparent"
)

// Action says what injection did to one pod template.
type Action string

const (
	ActionInjected        Action = "injected"
	ActionUpdated         Action = "updated"          // was injected; rebuilt for another version or other settings
	ActionAlreadyInjected Action = "already injected" // injected with this version and these settings; left unchanged
	ActionSkipped         Action = "skipped"          // opted out or not injectable; left unchanged
	ActionPassedThrough   Action = "passed through"   // not a Deployment, StatefulSet or Pod
)

// Changed reports whether the action rewrote the pod.
func (a Action) Changed() bool { return a == ActionInjected || a == ActionUpdated }

// Prometheus scrape annotations written on injected pods.
const (
	annScrape = "prometheus.io/scrape"
	annPort   = "prometheus.io/port"
	annPath   = "prometheus.io/path"
)

// Environment variables of the Stormgate container.
const (
	envAppProbes  = "STORMGATE_APP_PROBES" // appprobe.EnvVar
	envGoMemLimit = "GOMEMLIMIT"
	// envAddedSysctls records the pod sysctls injection added (AnnotationBacklogSysctls), so that
	// re-injection takes out exactly those. The sidecar does not read it.
	envAddedSysctls = "STORMGATE_ADDED_SYSCTLS"
)

// Pod injects Stormgate into one pod template. meta is the template's metadata (its annotations are read
// and written), spec its pod spec; parent holds the workload's own annotations, which the template's
// override (nil for a bare Pod). On any Action but ActionInjected and ActionUpdated, meta and spec are
// untouched. Warnings are things a person should know but that do not stop injection.
//
// A pod that is already injected is rebuilt: Stormgate's part is taken out (containers, volumes,
// annotations; rewritten probes get their original handlers back) and injected again with cfg. When the
// result is the pod as it is, the action is ActionAlreadyInjected; otherwise (a newer version, changed
// annotations or flags) ActionUpdated. So injecting is idempotent, and re-running it upgrades.
func Pod(meta *metav1.ObjectMeta, spec *corev1.PodSpec, parent map[string]string, cfg Config) (Action, []string, error) {
	if !looksInjected(meta, spec) {
		return injectPod(meta, spec, parent, cfg)
	}
	if why := partlyInjected(meta, spec); why != "" {
		return ActionAlreadyInjected, []string{"looks partly injected (" + why + "); left unchanged: remove Stormgate's traces (annotation " +
			AnnotationInjected + ", container " + ContainerName + ", init container " + InitContainerName + ") and inject again"}, nil
	}
	origMeta, origSpec := meta.DeepCopy(), spec.DeepCopy()
	if err := uninject(origMeta, origSpec); err != nil {
		return ActionAlreadyInjected, []string{"cannot take out Stormgate's part to re-inject (" + err.Error() + "); left unchanged"}, nil
	}
	action, warnings, err := injectPod(origMeta, origSpec, parent, cfg)
	if err != nil {
		return "", nil, err
	}
	if action == ActionSkipped {
		return ActionAlreadyInjected, append(warnings, "opted out or not injectable, but already injected; left unchanged: remove Stormgate's containers by hand or apply the original manifest"), nil
	}
	if withinJSON(origMeta, meta) && withinJSON(origSpec, spec) {
		return ActionAlreadyInjected, nil, nil
	}
	old := meta.Annotations[AnnotationInjected]
	*meta, *spec = *origMeta, *origSpec
	if old != meta.Annotations[AnnotationInjected] {
		warnings = append(warnings, fmt.Sprintf("re-injected: version %s -> %s", old, meta.Annotations[AnnotationInjected]))
	} else {
		warnings = append(warnings, "re-injected with changed settings")
	}
	return ActionUpdated, warnings, nil
}

func looksInjected(meta *metav1.ObjectMeta, spec *corev1.PodSpec) bool {
	_, annotated := meta.Annotations[AnnotationInjected]
	return annotated || slices.ContainsFunc(spec.Containers, isOurs) || slices.ContainsFunc(spec.InitContainers, isOurs) ||
		slices.ContainsFunc(spec.InitContainers, isOurInit)
}

// partlyInjected says what is missing or doubled when the pod does not hold exactly one of each of
// Stormgate's traces ("" when it does).
func partlyInjected(meta *metav1.ObjectMeta, spec *corev1.PodSpec) string {
	var why []string
	if meta.Annotations[AnnotationInjected] == "" {
		why = append(why, "no "+AnnotationInjected+" annotation")
	}
	if n := countFunc(spec.Containers, isOurs) + countFunc(spec.InitContainers, isOurs); n != 1 {
		why = append(why, fmt.Sprintf("%d containers named %s", n, ContainerName))
	}
	want := 1
	if slices.ContainsFunc(slices.Concat(spec.Containers, spec.InitContainers), isExplicit) {
		want = 0 // explicit-port mode has no init container
	}
	if n := countFunc(spec.InitContainers, isOurInit); n != want {
		why = append(why, fmt.Sprintf("%d init containers named %s", n, InitContainerName))
	}
	return strings.Join(why, ", ")
}

// sameJSON compares two API objects the way the API server would see them (nil and empty lists alike).
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func countFunc(cs []corev1.Container, f func(corev1.Container) bool) int {
	n := 0
	for _, c := range cs {
		if f(c) {
			n++
		}
	}
	return n
}

// withinJSON reports whether every value injection would write (want) is in the pod as it is (have),
// compared as the API server sees them (JSON: nil and empty alike): have may hold more, namely the
// defaults the API server filled in when it stored the pod (terminationMessagePath, imagePullPolicy,
// a probe's successThreshold), which a rebuilt pod lacks. Lists must have the same length, element by
// element within; a different value anywhere is a change.
func withinJSON(want, have any) bool {
	ja, errA := json.Marshal(want)
	jb, errB := json.Marshal(have)
	if errA != nil || errB != nil {
		return false
	}
	if bytes.Equal(ja, jb) {
		return true
	}
	var a, b any
	if json.Unmarshal(ja, &a) != nil || json.Unmarshal(jb, &b) != nil {
		return false
	}
	return jsonWithin(a, b)
}

func jsonWithin(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range a {
			if !jsonWithin(v, b[k]) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !jsonWithin(a[i], b[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

// injectPod injects a pod that holds none of Stormgate's traces.
func injectPod(meta *metav1.ObjectMeta, spec *corev1.PodSpec, parent map[string]string, cfg Config) (Action, []string, error) {
	var warnings []string
	ann := make(map[string]string, len(parent)+len(meta.Annotations))
	for k, v := range parent {
		ann[k] = v
	}
	for k, v := range meta.Annotations {
		ann[k] = v
	}
	if v, ok := ann[AnnotationInject]; ok {
		on, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return "", nil, fmt.Errorf("annotation %s: %q: want \"true\" or \"false\"", AnnotationInject, v)
		}
		if !on {
			return ActionSkipped, nil, nil
		}
	}
	if spec.HostNetwork {
		return ActionSkipped, []string{"hostNetwork pod not injected: its redirect rules would be installed on the node itself"}, nil
	}
	if v, ok := ann[AnnotationInboundPorts]; ok {
		ports, err := resolvePortNames(v, spec)
		if err != nil {
			return "", nil, fmt.Errorf("annotation %s: %w", AnnotationInboundPorts, err)
		}
		ann[AnnotationInboundPorts] = ports
	}
	c, err := cfg.withDefaults().withAnnotations(ann)
	if err != nil {
		return "", nil, err
	}

	own := map[int32]string{
		int32(c.ProxyPort): "proxy port (" + AnnotationProxyPort + ")", int32(c.MetricsPort): "metrics port (" + AnnotationMetricsPort + ")",
		AdminPort: "admin port",
	}
	declared := map[int32]bool{}
	for _, ctr := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, p := range ctr.Ports {
			declared[p.ContainerPort] = true
			if what, clash := own[p.ContainerPort]; clash {
				return "", nil, fmt.Errorf("container %q declares port %d, which is Stormgate's %s: pick another with the annotation", ctr.Name, p.ContainerPort, what)
			}
		}
	}
	for _, v := range spec.Volumes {
		if isOurVolume(v) {
			return "", nil, fmt.Errorf("the pod already has a volume named %q, which Stormgate uses: rename it", v.Name)
		}
	}
	for _, p := range c.InboundPorts {
		if !declared[int32(p)] {
			warnings = append(warnings, fmt.Sprintf("inbound port %d is not a containerPort of any container (set %s if the provider listens elsewhere)", p, AnnotationInboundPorts))
		}
	}
	if c.XDSAddress != "" && c.XDSCASecret == "" && !loopbackHost(c.XDSAddress) {
		warnings = append(warnings, fmt.Sprintf("control plane %s is reached in plaintext: anyone on the network path can read and change the settings it pushes; "+
			"set %s (and %s for mTLS) to the Secret(s) holding the CA and the sidecar's certificate", c.XDSAddress, AnnotationXDSCASecret, AnnotationXDSCertSecret))
	}

	var probes string
	if c.Redirect != RedirectNone { // without a redirect the kubelet's probes reach the provider as they are
		var probeWarnings []string
		if probes, probeWarnings, err = rewriteProbes(spec, c); err != nil {
			return "", nil, err
		}
		warnings = append(warnings, probeWarnings...)
	}

	settings, err := c.settings()
	if err != nil {
		return "", nil, err // Validate read them already
	}
	added, sysctlWarnings := backlogSysctls(spec, settings.GetListener().GetBacklog(), c.BacklogSysctls)
	warnings = append(warnings, sysctlWarnings...)

	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	// Scrape annotations name one port per pod. The application's, when it has them, stay: its
	// metrics keep being scraped, and Stormgate's are found by the named port sg-metrics
	// (docs/kubernetes.md, "Metrics"). Otherwise they point at Stormgate.
	if app := appScrapeAnnotations(meta.Annotations); app != "" {
		warnings = append(warnings, fmt.Sprintf("kept the application's scrape annotations (%s); Stormgate's metrics are on its port %s (%d): "+
			"scrape them by that port name (deploy/prometheus/scrape-stormgate.yaml, or a PodMonitor)", app, MetricsPortName, c.MetricsPort))
	} else {
		meta.Annotations[annScrape] = "true"
		meta.Annotations[annPort] = strconv.Itoa(int(c.MetricsPort))
		meta.Annotations[annPath] = "/metrics"
	}
	meta.Annotations[AnnotationInjected] = c.Version

	sidecar := sidecarContainer(c, probes)
	if c.XDSAddress != "" {
		sidecar.Env = append(sidecar.Env, xdsLabelEnv(meta.Labels)...) // for the control plane's selectors
	}
	at := 0
	if c.Redirect != RedirectNone {
		spec.InitContainers = slices.Insert(spec.InitContainers, 0, initContainer(c))
		at = 1
	}
	if c.NativeSidecar {
		sidecar.RestartPolicy = ptrTo(corev1.ContainerRestartPolicyAlways)
		sidecar.StartupProbe = httpProbe("/healthz", c.MetricsPort, 1, 30)
		spec.InitContainers = slices.Insert(spec.InitContainers, at, sidecar)
	} else {
		spec.Containers = append(spec.Containers, sidecar)
	}
	spec.Volumes = append(spec.Volumes, tlsVolumes(c)...)
	spec.Volumes = append(spec.Volumes, upgradeVolume())
	if len(added) > 0 {
		if spec.SecurityContext == nil {
			spec.SecurityContext = &corev1.PodSecurityContext{}
		}
		spec.SecurityContext.Sysctls = append(spec.SecurityContext.Sysctls, added...)
		sc := &spec.Containers[len(spec.Containers)-1]
		if c.NativeSidecar {
			sc = &spec.InitContainers[1]
		}
		names := make([]string, len(added))
		for i, sy := range added {
			names[i] = sy.Name
		}
		sc.Env = append(sc.Env, corev1.EnvVar{Name: envAddedSysctls, Value: strings.Join(names, ",")})
	}
	return ActionInjected, warnings, nil
}

// appScrapeAnnotations describes the pod's own prometheus.io/* annotations ("" when none).
func appScrapeAnnotations(ann map[string]string) string {
	var have []string
	for _, k := range []string{annScrape, annPort, annPath} {
		if v, ok := ann[k]; ok {
			have = append(have, k+": "+v)
		}
	}
	return strings.Join(have, ", ")
}

// Sysctls that bound a listening socket's queues in the pod's network namespace: a new namespace
// starts at net.core.somaxconn 4096 (Linux 5.4 and later), whatever the node says.
var backlogSysctlNames = []string{"net.core.somaxconn", "net.ipv4.tcp_max_syn_backlog"}

// newNetnsSomaxconn is net.core.somaxconn in a new network namespace (Linux 5.4 and later).
const newNetnsSomaxconn = 4096

// backlogSysctls returns the pod sysctls to add so that the listen backlog is not capped below
// backlog (when asked is true), and what a person should know: the pod's own lower values, or,
// when not asked, the cap and its fix. A pod that sets them itself keeps its values.
func backlogSysctls(spec *corev1.PodSpec, backlog int32, asked *bool) ([]corev1.Sysctl, []string) {
	own := map[string]string{}
	if spec.SecurityContext != nil {
		for _, sy := range spec.SecurityContext.Sysctls {
			own[sy.Name] = sy.Value
		}
	}
	want := strconv.Itoa(int(backlog))
	var add []corev1.Sysctl
	var warnings, missing []string
	for _, name := range backlogSysctlNames {
		v, set := own[name]
		if set {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n < int(backlog) {
				warnings = append(warnings, fmt.Sprintf("the pod sets %s=%s, below listener.backlog %d: the listen queue is capped at it", name, v, backlog))
			}
			continue
		}
		if asked != nil && *asked {
			add = append(add, corev1.Sysctl{Name: name, Value: want})
		} else {
			missing = append(missing, name)
		}
	}
	if asked == nil && slices.Contains(missing, backlogSysctlNames[0]) && backlog > newNetnsSomaxconn {
		warnings = append(warnings, fmt.Sprintf("listen backlog capped at %d: a pod's own network namespace starts with net.core.somaxconn=%d, "+
			"below listener.backlog %d (%d pending connections: about that many consumers reconnecting at once). "+
			"Annotate %s: \"true\" to set %s to %d in the pod (unsafe sysctls: the kubelet must allow them, "+
			"--allowed-unsafe-sysctls=%s, or it refuses the pod with SysctlForbidden), or \"false\" to keep the cap without this warning",
			newNetnsSomaxconn, newNetnsSomaxconn, backlog, newNetnsSomaxconn, AnnotationBacklogSysctls, strings.Join(missing, " and "), backlog,
			strings.Join(backlogSysctlNames, ",")))
	}
	return add, warnings
}

// loopbackHost reports whether host:port names this pod itself (127.0.0.0/8, ::1 or localhost).
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func isOurs(c corev1.Container) bool    { return c.Name == ContainerName }
func isOurInit(c corev1.Container) bool { return c.Name == InitContainerName }

// isExplicit reports whether c is Stormgate's container in explicit-port mode (RedirectNone).
func isExplicit(c corev1.Container) bool {
	return isOurs(c) && !slices.Contains(c.Args, "--transparent")
}

// initContainer runs `sidecar iptables`, which programs nftables over netlink: it needs root and
// CAP_NET_ADMIN in the pod's network namespace and nothing else (no NET_RAW, no programs, no writable
// file system); every other capability is dropped.
func initContainer(c Config) corev1.Container {
	return corev1.Container{
		Name:  InitContainerName,
		Image: c.InitImage,
		Args: []string{"iptables",
			"--inbound-ports", transparent.FormatPorts(c.InboundPorts),
			"--proxy-port", strconv.Itoa(int(c.ProxyPort))},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: mustQ("10m"), corev1.ResourceMemory: mustQ("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: mustQ("100m"), corev1.ResourceMemory: mustQ("64Mi")},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptrTo[int64](0),
			RunAsGroup:               ptrTo[int64](0),
			RunAsNonRoot:             ptrTo(false),
			Privileged:               ptrTo(false),
			AllowPrivilegeEscalation: ptrTo(false),
			ReadOnlyRootFilesystem:   ptrTo(true),
			Capabilities: &corev1.Capabilities{
				Add:  []corev1.Capability{"NET_ADMIN"},
				Drop: []corev1.Capability{"ALL"},
			},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// sidecarContainer runs `sidecar run --transparent` (explicit-port mode: `sidecar run --upstream`): non-root, no capabilities, read-only root fs.
// probes holds the application probes it runs for the kubelet (JSON; "" for none).
func sidecarContainer(c Config, probes string) corev1.Container {
	args := []string{"run", "--transparent", "--listen", listenAddr(c.ProxyPort), "--inbound-ports", transparent.FormatPorts(c.InboundPorts)}
	ports := []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: int32(c.MetricsPort), Protocol: corev1.ProtocolTCP}}
	if c.Redirect == RedirectNone {
		args = []string{"run", "--listen", listenAddr(c.ProxyPort), "--upstream", explicitUpstream(c.InboundPorts[0])}
		// Named, so that a Service can send consumers to it: targetPort: sg-dubbo.
		ports = append(ports, corev1.ContainerPort{Name: ProxyPortName, ContainerPort: int32(c.ProxyPort), Protocol: corev1.ProtocolTCP})
	}
	args = append(args,
		// ":port" rather than "[::]:port": Go listens dual stack where the node has IPv6 and falls back
		// to IPv4 where it has not; the kubelet probes the pod's primary address, of either family.
		"--metrics", ":"+strconv.Itoa(int(c.MetricsPort)),
		"--log-format", "json")
	if c.UpstreamConns > 0 {
		args = append(args, "--upstream-conns", strconv.Itoa(c.UpstreamConns))
	}
	if c.LogLevel != "" {
		args = append(args, "--log-level", c.LogLevel)
	}
	for _, a := range c.Settings {
		args = append(args, "--set", a.Path+"="+a.Value)
	}
	var env []corev1.EnvVar
	mounts := []corev1.VolumeMount{{Name: UpgradeVolume, MountPath: UpgradeDir}}
	if c.XDSAddress != "" {
		// Kubernetes expands $(VAR) in args from the container's env, so each pod gets its own node id.
		args = append(args, "--xds", c.XDSAddress, "--node-id", "$(POD_NAME).$(POD_NAMESPACE)")
		if c.XDSCASecret != "" {
			args = append(args, "--xds-ca", XDSCADir+"/ca.crt")
			mounts = append(mounts, corev1.VolumeMount{Name: XDSCAVolume, MountPath: XDSCADir, ReadOnly: true})
		}
		if c.XDSCertSecret != "" {
			args = append(args, "--xds-cert", XDSCertDir+"/tls.crt", "--xds-key", XDSCertDir+"/tls.key")
			mounts = append(mounts, corev1.VolumeMount{Name: XDSCertVolume, MountPath: XDSCertDir, ReadOnly: true})
		}
		env = append(env,
			corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		)
	}
	if q, ok := c.Limits[corev1.ResourceMemory]; ok {
		// The Go runtime does not read the cgroup memory limit; GOMEMLIMIT makes the GC work harder
		// near it instead of letting the container be OOM-killed. The kernel's memory for the
		// sidecar's sockets counts against the same limit, so the Go heap gets less than all of it.
		env = append(env, corev1.EnvVar{Name: envGoMemLimit, Value: goMemLimit(q)})
	}
	if probes != "" {
		env = append(env, corev1.EnvVar{Name: envAppProbes, Value: probes})
	}
	return corev1.Container{
		Name:         ContainerName,
		Image:        c.Image,
		Args:         args,
		Env:          env,
		VolumeMounts: mounts,
		Ports:        ports,
		Resources: corev1.ResourceRequirements{
			Requests: cloneResources(c.Requests),
			Limits:   cloneResources(c.Limits),
		},
		LivenessProbe:            httpProbe("/healthz", c.MetricsPort, 10, 3),
		ReadinessProbe:           httpProbe("/readyz", c.MetricsPort, 5, 3),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		SecurityContext: &corev1.SecurityContext{
			RunAsUser:                ptrTo[int64](SidecarUID),
			RunAsGroup:               ptrTo[int64](SidecarUID),
			RunAsNonRoot:             ptrTo(true),
			Privileged:               ptrTo(false),
			AllowPrivilegeEscalation: ptrTo(false),
			ReadOnlyRootFilesystem:   ptrTo(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

// upgradeVolume is the emptyDir a new binary is copied into for an in-place `sidecar upgrade`
// (docs/operations.md, "On Kubernetes"). An emptyDir is writable by every user of the pod, so the
// sidecar's user (1337) can use it without an fsGroup.
func upgradeVolume() corev1.Volume {
	return corev1.Volume{Name: UpgradeVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
		SizeLimit: ptrTo(resource.MustParse(UpgradeSizeLimit)),
	}}}
}

// isOurVolume reports whether v is one of the volumes injection adds.
func isOurVolume(v corev1.Volume) bool {
	return v.Name == XDSCAVolume || v.Name == XDSCertVolume || v.Name == UpgradeVolume
}

// tlsVolumes returns the Secret volumes the sidecar mounts for TLS to the control plane. Only the
// keys it reads are projected: a Secret without them keeps the pod from starting with an event naming
// the missing key, rather than a sidecar failing later. The files must be readable by the sidecar's
// user (1337) without an fsGroup on the pod, hence 0444; only the Stormgate container mounts them.
// Optional is written out (false, the default) because podman kube play 4.3 crashes without it.
func tlsVolumes(c Config) []corev1.Volume {
	secret := func(name, secretName string, keys ...string) corev1.Volume {
		items := make([]corev1.KeyToPath, len(keys))
		for i, k := range keys {
			items[i] = corev1.KeyToPath{Key: k, Path: k}
		}
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: secretName, Items: items, DefaultMode: ptrTo[int32](0o444), Optional: ptrTo(false),
		}}}
	}
	var vols []corev1.Volume
	if c.XDSAddress != "" && c.XDSCASecret != "" {
		vols = append(vols, secret(XDSCAVolume, c.XDSCASecret, "ca.crt"))
	}
	if c.XDSAddress != "" && c.XDSCertSecret != "" {
		vols = append(vols, secret(XDSCertVolume, c.XDSCertSecret, "tls.crt", "tls.key"))
	}
	return vols
}

// Kernel memory the sidecar's sockets take from the container's memory limit: measured 3.8 KiB of
// slab per idle TCP socket (kernel 6.18: tcp_sock, socket inode, file, epoll item), plus send and
// receive queues under load. 10,000 consumer connections are about 40 MiB at rest.
const (
	socketHeadroomMin = 96 << 20 // 10,000 idle connections' slab with room for their queues
	socketHeadroomDiv = 8        // or an eighth of the limit, whichever is more
)

// goMemLimit returns GOMEMLIMIT for a container memory limit: the limit less room for the kernel's
// socket memory (the larger of 96 MiB and an eighth of the limit, but never more than half of it).
func goMemLimit(limit resource.Quantity) string {
	l := limit.Value()
	headroom := min(max(l/socketHeadroomDiv, socketHeadroomMin), l/2)
	v := l - headroom
	if v%(1<<20) == 0 {
		return strconv.FormatInt(v>>20, 10) + "MiB"
	}
	return strconv.FormatInt(v, 10)
}

func httpProbe(path string, port uint16, periodSeconds, failureThreshold int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromInt32(int32(port)), Scheme: corev1.URISchemeHTTP,
		}},
		PeriodSeconds:    periodSeconds,
		TimeoutSeconds:   1,
		SuccessThreshold: 1,
		FailureThreshold: failureThreshold,
	}
}

func ptrTo[T any](v T) *T { return &v }

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
