package inject

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Action says what injection did to one pod template.
type Action string

const (
	ActionInjected        Action = "injected"
	ActionAlreadyInjected Action = "already injected" // left unchanged
	ActionSkipped         Action = "skipped"          // opted out or not injectable; left unchanged
	ActionPassedThrough   Action = "passed through"   // not a Deployment, StatefulSet or Pod
)

// Prometheus scrape annotations written on injected pods.
const (
	annScrape = "prometheus.io/scrape"
	annPort   = "prometheus.io/port"
	annPath   = "prometheus.io/path"
)

// Pod injects Stormgate into one pod template. meta is the template's metadata (its annotations are read
// and written), spec its pod spec; parent holds the workload's own annotations, which the template's
// override (nil for a bare Pod). On any Action but ActionInjected, meta and spec are untouched. Warnings
// are things a person should know but that do not stop injection.
func Pod(meta *metav1.ObjectMeta, spec *corev1.PodSpec, parent map[string]string, cfg Config) (Action, []string, error) {
	var warnings []string
	hasSidecar := slices.ContainsFunc(spec.Containers, isOurs) || slices.ContainsFunc(spec.InitContainers, isOurs)
	if meta.Annotations[AnnotationInjected] == "true" || hasSidecar {
		if !hasSidecar || !slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == InitContainerName }) ||
			meta.Annotations[AnnotationInjected] != "true" {
			warnings = append(warnings, "looks partly injected (annotation "+AnnotationInjected+
				", container "+ContainerName+" and init container "+InitContainerName+" do not all agree); left unchanged: remove Stormgate's traces and inject again")
		}
		return ActionAlreadyInjected, warnings, nil
	}

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
		return ActionSkipped, []string{"hostNetwork pod not injected: its iptables rules would be installed on the node itself"}, nil
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
	for _, p := range c.InboundPorts {
		if !declared[int32(p)] {
			warnings = append(warnings, fmt.Sprintf("inbound port %d is not a containerPort of any container (set %s if the provider listens elsewhere)", p, AnnotationInboundPorts))
		}
	}

	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	scrape := map[string]string{annScrape: "true", annPort: strconv.Itoa(int(c.MetricsPort)), annPath: "/metrics"}
	for _, k := range []string{annScrape, annPort, annPath} {
		if old, ok := meta.Annotations[k]; ok && old != scrape[k] {
			warnings = append(warnings, fmt.Sprintf("replaced %s %q with %q: scrape annotations name one port per pod, so the application's own metrics need a PodMonitor or ServiceMonitor", k, old, scrape[k]))
		}
		meta.Annotations[k] = scrape[k]
	}
	meta.Annotations[AnnotationInjected] = "true"

	sidecar := sidecarContainer(c)
	if c.XDSAddress != "" {
		sidecar.Env = append(sidecar.Env, xdsLabelEnv(meta.Labels)...) // for the control plane's selectors
	}
	spec.InitContainers = slices.Insert(spec.InitContainers, 0, initContainer(c))
	if c.NativeSidecar {
		sidecar.RestartPolicy = ptrTo(corev1.ContainerRestartPolicyAlways)
		sidecar.StartupProbe = httpProbe("/healthz", c.MetricsPort, 1, 30)
		spec.InitContainers = slices.Insert(spec.InitContainers, 1, sidecar)
	} else {
		spec.Containers = append(spec.Containers, sidecar)
	}
	return ActionInjected, warnings, nil
}

func isOurs(c corev1.Container) bool { return c.Name == ContainerName }

func joinPorts(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

// initContainer runs `sidecar iptables`. iptables needs root and CAP_NET_ADMIN in the pod's network
// namespace; every other capability is dropped. The image's iptables must use the nft backend: the
// legacy one also needs CAP_NET_RAW.
func initContainer(c Config) corev1.Container {
	return corev1.Container{
		Name:  InitContainerName,
		Image: c.InitImage,
		Args: []string{"iptables",
			"--inbound-ports", joinPorts(c.InboundPorts),
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

// sidecarContainer runs `sidecar run --transparent`: non-root, no capabilities, read-only root fs.
func sidecarContainer(c Config) corev1.Container {
	args := []string{"run", "--transparent",
		"--listen", "0.0.0.0:" + strconv.Itoa(int(c.ProxyPort)),
		"--inbound-ports", joinPorts(c.InboundPorts),
		"--metrics", "0.0.0.0:" + strconv.Itoa(int(c.MetricsPort)),
		"--log-format", "json"}
	if c.UpstreamConns > 0 {
		args = append(args, "--upstream-conns", strconv.Itoa(c.UpstreamConns))
	}
	if c.LogLevel != "" {
		args = append(args, "--log-level", c.LogLevel)
	}
	var env []corev1.EnvVar
	if c.XDSAddress != "" {
		// Kubernetes expands $(VAR) in args from the container's env, so each pod gets its own node id.
		args = append(args, "--xds", c.XDSAddress, "--node-id", "$(POD_NAME).$(POD_NAMESPACE)")
		env = append(env,
			corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			corev1.EnvVar{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
		)
	}
	if _, ok := c.Limits[corev1.ResourceMemory]; ok {
		// The Go runtime does not read the cgroup memory limit; GOMEMLIMIT makes the GC work harder
		// near it instead of letting the container be OOM-killed.
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{
			ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory", Divisor: mustQ("1")}}})
	}
	return corev1.Container{
		Name:  ContainerName,
		Image: c.Image,
		Args:  args,
		Env:   env,
		Ports: []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: int32(c.MetricsPort), Protocol: corev1.ProtocolTCP}},
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
