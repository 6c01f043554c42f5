package inject

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/transparent"
)

// Annotations read from a pod template (or its workload) and written by injection.
const (
	// AnnotationInject set to "false" leaves the workload alone.
	AnnotationInject = "stormgate.io/inject"
	// AnnotationInjected is written on every injected pod template: the version of Stormgate that
	// injected it. Injecting an injected pod again rebuilds Stormgate's part from the pod's original
	// spec: nothing changes when version and settings are the same, and a newer version (or changed
	// annotations) updates it.
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
	// AnnotationXDSCASecret names a Secret whose ca.crt verifies the control plane's certificate: the
	// sidecar talks TLS to the control plane.
	AnnotationXDSCASecret = "stormgate.io/xds-ca-secret"
	// AnnotationXDSCertSecret names a kubernetes.io/tls Secret (tls.crt, tls.key) with the sidecar's
	// client certificate: mutual TLS. Needs AnnotationXDSCASecret (it may name the same Secret, as a
	// cert-manager Certificate's Secret carries ca.crt too).
	AnnotationXDSCertSecret = "stormgate.io/xds-cert-secret"
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
	// AnnotationBacklogSysctls "true" sets the pod's net.core.somaxconn and
	// net.ipv4.tcp_max_syn_backlog to listener.backlog, so the listen backlog is not capped at a
	// new network namespace's 4096 (both are unsafe sysctls: the kubelet must allow them, or the pod
	// is refused with SysctlForbidden); "false" accepts the cap. Unset, injection warns with the fix.
	AnnotationBacklogSysctls = "stormgate.io/backlog-sysctls"
	// AnnotationRedirect says how consumers' connections reach Stormgate: RedirectInitContainer (the
	// default) or RedirectNone. See Config.Redirect.
	AnnotationRedirect = "stormgate.io/redirect"
)

// Values of AnnotationRedirect (and Config.Redirect).
const (
	// RedirectInitContainer: the init container (root, CAP_NET_ADMIN) redirects the inbound ports to
	// the transparent listener. Consumers keep dialing the provider's port. Needs a namespace whose Pod
	// Security level is privileged.
	RedirectInitContainer = "init-container"
	// RedirectNone: explicit-port mode. No init container and no capability: the sidecar listens on
	// the proxy port and forwards to 127.0.0.1:<the one inbound port>; consumers (or the Service's
	// targetPort, or the address the provider registers) must name the proxy port. Admitted at every
	// Pod Security level, restricted included.
	RedirectNone = "none"
)

// Names of what injection adds.
const (
	ContainerName     = "stormgate"
	InitContainerName = "stormgate-init"
	// MetricsPortName names the metrics containerPort (at most 15 characters).
	MetricsPortName = "sg-metrics"
	// ProxyPortName names the proxy port in explicit-port mode (RedirectNone), for Services' targetPort.
	ProxyPortName = "sg-dubbo"
	// Volumes holding the control plane's CA and the sidecar's client certificate, and where the
	// sidecar container mounts them.
	XDSCAVolume   = "stormgate-xds-ca"
	XDSCertVolume = "stormgate-xds-cert"
	XDSCADir      = "/etc/stormgate/xds-ca"
	XDSCertDir    = "/etc/stormgate/xds-cert"
	// UpgradeVolume is a writable emptyDir the sidecar container mounts at UpgradeDir, so that a
	// new binary can reach the running container for `sidecar upgrade` (the root filesystem is
	// read-only). UpgradeSizeLimit bounds it: a few binaries.
	UpgradeVolume    = "stormgate-bin"
	UpgradeDir       = "/stormgate-bin"
	UpgradeSizeLimit = "128Mi"
)

// Defaults used when neither Config nor an annotation says otherwise.
const (
	// DefaultRepository is the image name; the tag is Config.Version (the injecting binary's own
	// version), so `sidecar inject` of release X writes image X. The one image is both the init
	// container (sidecar iptables) and the sidecar (sidecar run).
	DefaultRepository  = "stormgate/sidecar"
	DefaultVersion     = "dev"
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
	// Version is the Stormgate version doing the injection: the default image tag and the value of the
	// stormgate.io/injected annotation. Empty means DefaultVersion.
	Version       string
	Image         string   // Stormgate image; empty means DefaultRepository:Version
	InitImage     string   // image of the init container (it runs `sidecar iptables`); empty means Image
	InboundPorts  []uint16 // empty means {DefaultInboundPort}
	ProxyPort     uint16   // 0 means DefaultProxyPort
	MetricsPort   uint16   // 0 means DefaultMetricsPort
	UpstreamConns int      // 0 leaves the run command's default; else the settings' range (1-64)
	XDSAddress    string   // host:port of the control plane; empty means none
	// XDSCASecret and XDSCertSecret name the Secrets for TLS and mTLS to the control plane (see the
	// annotations of the same names); empty means plaintext.
	XDSCASecret, XDSCertSecret string
	LogLevel                   string // empty leaves the run command's default
	// Resources of the Stormgate container; a nil map means the default (see DefaultResources). A
	// present but empty map means none at all.
	Requests, Limits corev1.ResourceList
	NativeSidecar    bool
	// Settings are further settings of every injected sidecar (`sidecar run --set`), from `sidecar
	// inject --set`; a pod's settings annotations (SettingAnnotation) replace them path by path.
	Settings []settings.Assignment
	// BacklogSysctls says whether to set the pod's backlog sysctls (AnnotationBacklogSysctls); nil
	// leaves them and warns.
	BacklogSysctls *bool
	Redirect       string // RedirectInitContainer or RedirectNone; empty means RedirectInitContainer
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

// DefaultImage returns the image `sidecar inject` of this version writes: DefaultRepository:version.
func DefaultImage(version string) string {
	if version == "" {
		version = DefaultVersion
	}
	return DefaultRepository + ":" + version
}

// withDefaults fills every zero field.
func (c Config) withDefaults() Config {
	if c.Version == "" {
		c.Version = DefaultVersion
	}
	if c.Image == "" {
		c.Image = DefaultImage(c.Version)
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
	if c.Redirect == "" {
		c.Redirect = RedirectInitContainer
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

// Validate reports a Config that cannot produce a working pod: every value the sidecar would refuse
// (checked with the sidecar's own settings validation, so the ranges are the same) and every
// combination that would start a pod that cannot work.
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
	switch c.Redirect {
	case RedirectInitContainer:
	case RedirectNone:
		if len(c.InboundPorts) != 1 {
			errs = append(errs, fmt.Errorf("%s %q forwards exactly one port (the sidecar listens on proxy port %d and forwards to 127.0.0.1:<port>), not %d: "+
				"name one port in %s, or give each provider port its own pod", describeField("redirect"), RedirectNone, c.ProxyPort, len(c.InboundPorts), AnnotationInboundPorts))
		}
	default:
		errs = append(errs, fmt.Errorf("%s %q: want %q (an init container with NET_ADMIN redirects the inbound ports) or %q (explicit port: no init container, consumers connect to the proxy port)",
			describeField("redirect"), c.Redirect, RedirectInitContainer, RedirectNone))
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		q, limited := c.Limits[name]
		if r, ok := c.Requests[name]; ok && limited && r.Cmp(q) > 0 {
			errs = append(errs, fmt.Errorf("%s request %s is above its limit %s", name, r.String(), q.String()))
		}
	}
	if q, ok := c.Limits[corev1.ResourceMemory]; ok && q.Value() < minMemoryLimit {
		errs = append(errs, fmt.Errorf("memory limit %s: below %dMi the sidecar cannot hold its buffers; use at least %dMi", q.String(), minMemoryLimit>>20, minMemoryLimit>>20))
	}
	if c.XDSAddress != "" {
		if err := checkHostPort(c.XDSAddress); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", describeField("xds-address"), c.XDSAddress, err))
		}
	}
	for _, sec := range []struct{ field, name string }{{"xds-ca-secret", c.XDSCASecret}, {"xds-cert-secret", c.XDSCertSecret}} {
		if sec.name == "" {
			continue
		}
		if msgs := validation.IsDNS1123Subdomain(sec.name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s %q is not a Secret name: %s", describeField(sec.field), sec.name, strings.Join(msgs, "; ")))
		}
		if c.XDSAddress == "" {
			errs = append(errs, fmt.Errorf("%s is set but there is no control plane (%s)", describeField(sec.field), describeField("xds-address")))
		}
	}
	if c.XDSCertSecret != "" && c.XDSCASecret == "" {
		errs = append(errs, fmt.Errorf("%s needs %s too: the image has no system CA roots, so name the Secret whose ca.crt signed "+
			"the control plane's certificate (a cert-manager Certificate's Secret has ca.crt: it may be the same Secret)",
			describeField("xds-cert-secret"), describeField("xds-ca-secret")))
	}
	for _, a := range c.Settings {
		if ann, ok := dedicatedSettings[a.Path]; ok {
			errs = append(errs, fmt.Errorf("--set %s: use %s", a.Path, describeField(strings.TrimPrefix(ann, annotationPrefix))))
		} else if why, ok := fixedInPod[a.Path]; ok {
			errs = append(errs, fmt.Errorf("--set %s: cannot be set per pod: %s", a.Path, why))
		}
	}
	s, err := c.settings()
	if err == nil {
		err = settings.Validate(s)
	}
	var ps settings.Problems
	switch {
	case errors.As(err, &ps):
		for _, p := range ps {
			errs = append(errs, fmt.Errorf("%s: %s: %s", describeSetting(p.Field), p.Field, p.Message))
		}
	case err != nil:
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// describeSetting names what sets a setting in a pod: its annotation and flag.
func describeSetting(path string) string {
	path, _, _ = strings.Cut(path, "[") // listener.inbound_ports[0]
	ann, ok := SettingAnnotation(path)
	switch {
	case !ok:
		return "settings"
	case dedicatedSettings[path] != "":
		return describeField(strings.TrimPrefix(ann, annotationPrefix))
	}
	return "annotation " + ann + " (flag --set " + path + "=...)"
}

// minMemoryLimit is the smallest memory limit injection accepts for the sidecar.
const minMemoryLimit = 64 << 20

// describeField names an annotation (without its stormgate.io/ prefix) and its flag:
// "annotation stormgate.io/upstream-conns (flag --upstream-conns)".
func describeField(name string) string {
	if name == "" {
		return "settings"
	}
	flag := name
	if name == "xds-address" {
		flag = "xds"
	}
	return "annotation stormgate.io/" + name + " (flag --" + flag + ")"
}

// settings returns what the sidecar's flags will make of c, over the defaults: the value the sidecar
// validates at start-up, so injection can refuse what would crash-loop. The error is the settings
// decoder's, for a value of c.Settings it cannot read.
func (c Config) settings() (*sg.Settings, error) {
	// What the sidecar's flags and --set will say, read by its own decoder (settings.ParseAssignments
	// is what `sidecar run` reads its flags with).
	as := []settings.Assignment{
		{Path: "listener.address", Value: listenAddr(c.ProxyPort)},
		{Path: "listener.transparent", Value: strconv.FormatBool(c.Redirect != RedirectNone)},
	}
	if c.Redirect == RedirectNone && len(c.InboundPorts) == 1 {
		as = append(as, settings.Assignment{Path: "upstream.address", Value: explicitUpstream(c.InboundPorts[0])})
	} else {
		as = append(as, settings.Assignment{Path: "listener.inbound_ports", Value: "[" + transparent.FormatPorts(c.InboundPorts) + "]"})
	}
	if c.UpstreamConns != 0 {
		as = append(as, settings.Assignment{Path: "upstream.connections", Value: strconv.Itoa(min(c.UpstreamConns, 1<<30))})
	}
	if c.LogLevel != "" {
		as = append(as, settings.Assignment{Path: "log.level", Value: c.LogLevel})
	}
	for _, a := range c.Settings {
		if dedicatedSettings[a.Path] == "" && fixedInPod[a.Path] == "" {
			as = append(as, a) // the others are refused by Validate
		}
	}
	over, err := settings.ParseAssignments(as)
	if err != nil {
		return nil, err
	}
	return settings.WithDefaults(over), nil
}

// explicitUpstream is where the sidecar forwards in explicit-port mode: the provider in the same pod.
func explicitUpstream(port uint16) string {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port).String()
}

// listenAddr is the sidecar's listen address for port: every address, IPv4 and IPv6 (the sidecar falls
// back to IPv4 alone on nodes without IPv6).
func listenAddr(port uint16) string {
	return netip.AddrPortFrom(netip.IPv6Unspecified(), port).String()
}

// checkHostPort accepts host:port with a port from 1 to 65535 and a non-empty host.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port, e.g. stormgate-control-plane.stormgate-system.svc:18000")
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q: want a number from 1 to 65535", port)
	}
	if host == "" {
		return errors.New("empty host")
	}
	return nil
}

// withAnnotations returns c overridden by the stormgate.io/* annotations in ann; an unknown one
// is an error.
func (c Config) withAnnotations(ann map[string]string) (Config, error) {
	errs := checkAnnotationNames(ann)
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
			bad(AnnotationUpstreamConns, v, "a number of connections from 1 to 64")
		} else {
			c.UpstreamConns = n
		}
	}
	str(AnnotationXDSAddress, &c.XDSAddress)
	str(AnnotationXDSCASecret, &c.XDSCASecret)
	str(AnnotationXDSCertSecret, &c.XDSCertSecret)
	str(AnnotationLogLevel, &c.LogLevel)
	str(AnnotationRedirect, &c.Redirect)
	str(AnnotationImage, &c.Image)
	str(AnnotationInitImage, &c.InitImage)
	if c.InitImage == "" {
		c.InitImage = c.Image // one image is both the init container and the sidecar
	}
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
	if v, ok := ann[AnnotationBacklogSysctls]; ok {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			bad(AnnotationBacklogSysctls, v, `"true" or "false"`)
		} else {
			c.BacklogSysctls = &b
		}
	}
	c.Settings = settingsFromAnnotations(c.Settings, ann)
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
