package inject

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/stormgate/stormgate/transparent"
)

// Annotations read from a pod template (or its workload) and written by injection.
const (
	// AnnotationInject set to "false" leaves the workload alone.
	AnnotationInject = "stormgate.io/inject"
	// AnnotationInjected is written on every injected pod template; its presence makes injection a no-op.
	AnnotationInjected = "stormgate.io/injected"
	// AnnotationInboundPorts lists the provider ports to redirect through Stormgate: "20880,20881".
	// It is also the allow-list Stormgate forwards to.
	AnnotationInboundPorts = "stormgate.io/inbound-ports"
	// AnnotationProxyPort is the transparent listener's port (default 15006).
	AnnotationProxyPort = "stormgate.io/proxy-port"
	// AnnotationMetricsPort is the port of /metrics, /healthz and /readyz (default 15090).
	AnnotationMetricsPort = "stormgate.io/metrics-port"
	// AnnotationUpstreamConns is the number of connections to the provider per port (sidecar run
	// --upstream-conns; empty means the run command's default).
	AnnotationUpstreamConns = "stormgate.io/upstream-conns"
	// AnnotationXDSAddress is the control plane's host:port; empty means no xDS (flags only).
	AnnotationXDSAddress = "stormgate.io/xds-address"
	// AnnotationLogLevel is passed to --log-level.
	AnnotationLogLevel = "stormgate.io/log-level"
	// AnnotationImage and AnnotationInitImage override the container images.
	AnnotationImage     = "stormgate.io/image"
	AnnotationInitImage = "stormgate.io/init-image"
	// Resource overrides for the Stormgate container, as Kubernetes quantities ("250m", "256Mi").
	AnnotationCPURequest    = "stormgate.io/cpu-request"
	AnnotationMemoryRequest = "stormgate.io/memory-request"
	AnnotationCPULimit      = "stormgate.io/cpu-limit"
	AnnotationMemoryLimit   = "stormgate.io/memory-limit"
	// AnnotationNativeSidecar "true" runs Stormgate as a native sidecar (an init container with
	// restartPolicy: Always; Kubernetes 1.29 or later), so it is up before the provider starts and stops
	// after it.
	AnnotationNativeSidecar = "stormgate.io/native-sidecar"
)

// Names of what injection adds.
const (
	ContainerName     = "stormgate"
	InitContainerName = "stormgate-init"
	// MetricsPortName names the metrics containerPort (at most 15 characters).
	MetricsPortName = "sg-metrics"
)

// Defaults used when neither Config nor an annotation says otherwise.
const (
	DefaultImage       = "stormgate/sidecar:latest"
	DefaultInitImage   = "stormgate/sidecar-init:latest"
	DefaultInboundPort = 20880
	DefaultProxyPort   = 15006
	DefaultMetricsPort = 15090
	// AdminPort is where `sidecar run` serves its admin endpoints by default (loopback only); injection
	// refuses pods that already use it.
	AdminPort = 15000
	// SidecarUID is the user Stormgate runs as (Istio's proxy uses the same number).
	SidecarUID = 1337
)

// Config is what `sidecar inject` knows before looking at a manifest. The zero value means "all
// defaults"; annotations on each workload override it field by field.
type Config struct {
	Image         string   // Stormgate image; empty means DefaultImage
	InitImage     string   // image holding the sidecar binary and iptables; empty means DefaultInitImage
	InboundPorts  []uint16 // empty means {DefaultInboundPort}
	ProxyPort     uint16   // 0 means DefaultProxyPort
	MetricsPort   uint16   // 0 means DefaultMetricsPort
	UpstreamConns int      // 0 leaves the run command's default; negative is invalid
	XDSAddress    string   // host:port of the control plane; empty means none
	LogLevel      string   // empty leaves the run command's default
	// Resources of the Stormgate container; a nil map means the default (see DefaultResources). A
	// present but empty map means none at all.
	Requests, Limits corev1.ResourceList
	NativeSidecar    bool
}

// DefaultResources returns the Stormgate container's default requests and limits. The memory limit is
// sized for about 10,000 idle consumers at the design's 8 KiB each plus buffers; docs/operations.md
// ("Sizing") is where measured figures live.
func DefaultResources() (requests, limits corev1.ResourceList) {
	return corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		}, corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("1Gi"),
		}
}

// withDefaults fills every zero field.
func (c Config) withDefaults() Config {
	if c.Image == "" {
		c.Image = DefaultImage
	}
	if c.InitImage == "" {
		c.InitImage = DefaultInitImage
	}
	if len(c.InboundPorts) == 0 {
		c.InboundPorts = []uint16{DefaultInboundPort}
	}
	if c.ProxyPort == 0 {
		c.ProxyPort = DefaultProxyPort
	}
	if c.MetricsPort == 0 {
		c.MetricsPort = DefaultMetricsPort
	}
	req, lim := DefaultResources()
	if c.Requests == nil {
		c.Requests = req
	}
	if c.Limits == nil {
		c.Limits = lim
	}
	return c
}

// Validate reports a Config that cannot produce a working pod.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.UpstreamConns < 0 {
		errs = append(errs, fmt.Errorf("upstream connections %d: must be positive", c.UpstreamConns))
	}
	own := []uint16{c.ProxyPort, c.MetricsPort, AdminPort}
	if c.ProxyPort == c.MetricsPort || c.ProxyPort == AdminPort || c.MetricsPort == AdminPort {
		errs = append(errs, fmt.Errorf("proxy port %d, metrics port %d and admin port %d must differ", c.ProxyPort, c.MetricsPort, AdminPort))
	}
	for _, p := range c.InboundPorts {
		if p == 0 {
			errs = append(errs, errors.New("inbound port 0 is not a port"))
		} else if slices.Contains(own, p) {
			errs = append(errs, fmt.Errorf("inbound port %d is one of Stormgate's own ports (proxy %d, metrics %d, admin %d)", p, c.ProxyPort, c.MetricsPort, AdminPort))
		}
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, limited := c.Limits[name]
		if r, ok := c.Requests[name]; ok && limited && r.Cmp(q) > 0 {
			errs = append(errs, fmt.Errorf("%s request %s is above its limit %s", name, r.String(), q.String()))
		}
	}
	return errors.Join(errs...)
}

// withAnnotations returns c overridden by the stormgate.io/* annotations in ann.
func (c Config) withAnnotations(ann map[string]string) (Config, error) {
	var errs []error
	bad := func(key, v, want string) { errs = append(errs, fmt.Errorf("annotation %s: %q: want %s", key, v, want)) }
	port := func(key string, dst *uint16) {
		if v, ok := ann[key]; ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
			if err != nil || n == 0 {
				bad(key, v, "a port from 1 to 65535")
				return
			}
			*dst = uint16(n)
		}
	}
	str := func(key string, dst *string) {
		if v, ok := ann[key]; ok {
			if strings.TrimSpace(v) == "" {
				bad(key, v, "a non-empty value")
				return
			}
			*dst = strings.TrimSpace(v)
		}
	}
	quantity := func(key string, list *corev1.ResourceList, name corev1.ResourceName) {
		v, ok := ann[key]
		if !ok {
			return
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(v))
		if err != nil || q.Sign() <= 0 {
			bad(key, v, "a positive Kubernetes quantity such as 250m or 256Mi")
			return
		}
		*list = cloneResources(*list)
		(*list)[name] = q
	}

	if v, ok := ann[AnnotationInboundPorts]; ok {
		ports, err := transparent.ParsePorts(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("annotation %s: %w", AnnotationInboundPorts, err))
		case len(ports) == 0:
			bad(AnnotationInboundPorts, v, "at least one port, e.g. 20880")
		default:
			c.InboundPorts = ports
		}
	}
	port(AnnotationProxyPort, &c.ProxyPort)
	port(AnnotationMetricsPort, &c.MetricsPort)
	if v, ok := ann[AnnotationUpstreamConns]; ok {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			bad(AnnotationUpstreamConns, v, "a positive number of connections")
		} else {
			c.UpstreamConns = n
		}
	}
	str(AnnotationXDSAddress, &c.XDSAddress)
	str(AnnotationLogLevel, &c.LogLevel)
	str(AnnotationImage, &c.Image)
	str(AnnotationInitImage, &c.InitImage)
	quantity(AnnotationCPURequest, &c.Requests, corev1.ResourceCPU)
	quantity(AnnotationMemoryRequest, &c.Requests, corev1.ResourceMemory)
	quantity(AnnotationCPULimit, &c.Limits, corev1.ResourceCPU)
	quantity(AnnotationMemoryLimit, &c.Limits, corev1.ResourceMemory)
	if v, ok := ann[AnnotationNativeSidecar]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			bad(AnnotationNativeSidecar, v, `"true" or "false"`)
		} else {
			c.NativeSidecar = b
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, c.Validate()
}

// cloneResources returns a copy of l, so an annotation never writes into the Config the caller passed.
func cloneResources(l corev1.ResourceList) corev1.ResourceList {
	out := make(corev1.ResourceList, len(l)+1)
	for k, v := range l {
		out[k] = v.DeepCopy()
	}
	return out
}
