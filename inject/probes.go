package inject

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/stormgate/stormgate/inject/appprobe"
)

// appContainers returns pointers to the containers whose probes the kubelet runs: the application's
// containers and its native sidecars (init containers with restartPolicy Always), not Stormgate's.
func appContainers(spec *corev1.PodSpec) []*corev1.Container {
	var out []*corev1.Container
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways && !isOurs(*c) {
			out = append(out, c)
		}
	}
	for i := range spec.Containers {
		if c := &spec.Containers[i]; !isOurs(*c) {
			out = append(out, c)
		}
	}
	return out
}

// probesOf returns a container's probes by kind; entries may point at nil.
func probesOf(c *corev1.Container) []containerProbe {
	return []containerProbe{
		{appprobe.Liveness, "liveness", &c.LivenessProbe},
		{appprobe.Readiness, "readiness", &c.ReadinessProbe},
		{appprobe.Startup, "startup", &c.StartupProbe},
	}
}

// containerProbe is one probe slot of a container.
type containerProbe struct {
	kind, name string // appprobe kind (path element) and its English name
	probe      **corev1.Probe
}

// resolvePort turns a probe's port (a number or a container port's name) into a number; 0 when a name
// matches no port of the container.
func resolvePort(c *corev1.Container, p intstr.IntOrString) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// rewriteProbes points every tcpSocket and httpGet probe on a redirected port at the sidecar's
// /app-health path on the metrics port, keeping its timings, and returns the original handlers as the
// JSON the sidecar runs them from ("" when nothing was rewritten). Without it, the kubelet's probe of
// pod-IP:20880 would be redirected to Stormgate: a tcpSocket probe would pass with the provider dead.
func rewriteProbes(spec *corev1.PodSpec, c Config) (string, []string, error) {
	set := appprobe.Set{}
	var warnings []string
	for _, ctr := range appContainers(spec) {
		for _, pr := range probesOf(ctr) {
			p := *pr.probe
			if p == nil {
				continue
			}
			where := fmt.Sprintf("container %q %s probe", ctr.Name, pr.name)
			var port int
			var host string
			switch {
			case p.TCPSocket != nil:
				port, host = resolvePort(ctr, p.TCPSocket.Port), p.TCPSocket.Host
			case p.HTTPGet != nil:
				port, host = resolvePort(ctr, p.HTTPGet.Port), p.HTTPGet.Host
			case p.GRPC != nil && slices.Contains(c.InboundPorts, uint16(p.GRPC.Port)):
				warnings = append(warnings, fmt.Sprintf("%s is a gRPC probe on redirected port %d: Stormgate answers it, not the provider; use a tcpSocket or exec probe", where, p.GRPC.Port))
				continue
			default:
				continue // exec probes run inside the container; gRPC on other ports is not redirected
			}
			if !slices.Contains(c.InboundPorts, uint16(port)) {
				continue
			}
			if host != "" {
				warnings = append(warnings, where+" names host "+host+": not rewritten")
				continue
			}
			var orig appprobe.Probe
			if p.TCPSocket != nil {
				orig.TCPSocket = &appprobe.TCPSocket{Port: port}
			} else {
				g := &appprobe.HTTPGet{Path: p.HTTPGet.Path, Port: port, Scheme: string(p.HTTPGet.Scheme)}
				for _, h := range p.HTTPGet.HTTPHeaders {
					g.HTTPHeaders = append(g.HTTPHeaders, appprobe.Header{Name: h.Name, Value: h.Value})
				}
				orig.HTTPGet = g
			}
			orig.TimeoutSeconds = p.TimeoutSeconds
			path := appprobe.Path(ctr.Name, pr.kind)
			set[path] = orig
			np := p.DeepCopy()
			np.ProbeHandler = corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromInt32(int32(c.MetricsPort)), Scheme: corev1.URISchemeHTTP,
			}}
			*pr.probe = np
		}
	}
	if len(set) == 0 {
		return "", warnings, nil
	}
	js, err := set.Encode()
	return js, warnings, err
}

// uninject takes Stormgate's part out of an injected pod: its containers, volumes and annotations,
// and the original handlers of the probes injection rewrote. The result is the pod injection started
// from, except that named probe ports come back as numbers.
func uninject(meta *metav1.ObjectMeta, spec *corev1.PodSpec) error {
	var sidecar *corev1.Container
	for _, cs := range [][]corev1.Container{spec.Containers, spec.InitContainers} {
		if i := slices.IndexFunc(cs, isOurs); i >= 0 {
			sidecar = cs[i].DeepCopy()
		}
	}
	if sidecar == nil {
		return errors.New("no " + ContainerName + " container")
	}
	metricsPort := 0
	for _, p := range sidecar.Ports {
		if p.Name == MetricsPortName {
			metricsPort = int(p.ContainerPort)
		}
	}
	var set appprobe.Set
	var sysctls []string
	for _, e := range sidecar.Env {
		switch e.Name {
		case envAppProbes:
			var err error
			if set, err = appprobe.Parse(e.Value); err != nil {
				return err
			}
		case envAddedSysctls:
			sysctls = strings.Split(e.Value, ",")
		}
	}
	if sc := spec.SecurityContext; sc != nil && len(sysctls) > 0 {
		sc.Sysctls = slices.DeleteFunc(sc.Sysctls, func(sy corev1.Sysctl) bool { return slices.Contains(sysctls, sy.Name) })
		if len(sc.Sysctls) == 0 {
			sc.Sysctls = nil
		}
		if sameJSON(sc, &corev1.PodSecurityContext{}) {
			spec.SecurityContext = nil
		}
	}
	spec.Containers = slices.DeleteFunc(spec.Containers, isOurs)
	spec.InitContainers = slices.DeleteFunc(spec.InitContainers, func(c corev1.Container) bool { return isOurs(c) || isOurInit(c) })
	spec.Volumes = slices.DeleteFunc(spec.Volumes, isOurVolume)
	if len(spec.Containers) == 0 {
		spec.Containers = nil
	}
	if len(spec.InitContainers) == 0 {
		spec.InitContainers = nil
	}
	if len(spec.Volumes) == 0 {
		spec.Volumes = nil
	}

	for _, ctr := range appContainers(spec) {
		for _, pr := range probesOf(ctr) {
			p := *pr.probe
			if p == nil || p.HTTPGet == nil || !strings.HasPrefix(p.HTTPGet.Path, appprobe.PathPrefix) || p.HTTPGet.Port.IntValue() != metricsPort {
				continue
			}
			orig, ok := set[p.HTTPGet.Path]
			if !ok {
				return fmt.Errorf("container %q probe %s points at Stormgate but its original is not recorded in %s", ctr.Name, p.HTTPGet.Path, envAppProbes)
			}
			np := p.DeepCopy()
			np.ProbeHandler = corev1.ProbeHandler{}
			if orig.TCPSocket != nil {
				np.TCPSocket = &corev1.TCPSocketAction{Port: intstr.FromInt(orig.TCPSocket.Port)}
			} else {
				g := &corev1.HTTPGetAction{Path: orig.HTTPGet.Path, Port: intstr.FromInt(orig.HTTPGet.Port), Scheme: corev1.URIScheme(orig.HTTPGet.Scheme)}
				for _, h := range orig.HTTPGet.HTTPHeaders {
					g.HTTPHeaders = append(g.HTTPHeaders, corev1.HTTPHeader{Name: h.Name, Value: h.Value})
				}
				np.HTTPGet = g
			}
			*pr.probe = np
		}
	}

	delete(meta.Annotations, AnnotationInjected)
	// Injection writes all three scrape annotations or none (the application's own stay).
	ours := map[string]string{annScrape: "true", annPort: fmt.Sprint(metricsPort), annPath: "/metrics"}
	mine := true
	for k, v := range ours {
		mine = mine && meta.Annotations[k] == v
	}
	for k := range ours {
		if mine {
			delete(meta.Annotations, k)
		}
	}
	if len(meta.Annotations) == 0 {
		meta.Annotations = nil
	}
	return nil
}
