package inject

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/stormgate/stormgate/settings"
)

// sidecarOf injects annotations (a Pod) and returns the Stormgate container and the pod.
func sidecarOf(t *testing.T, annotations string, cfg Config) (corev1.Container, decoded, Result) {
	t.Helper()
	out, res, err := Manifest(podWith(annotations), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pod := decodeAll(t, out)[0]
	return pod.spec.Containers[len(pod.spec.Containers)-1], pod, res[0]
}

// Issue 24: a stormgate.io/ annotation injection does not know is an error, with the nearest
// known one; a typo of the opt-out does not inject the pod.
func TestUnknownAnnotationsAreErrors(t *testing.T) {
	for _, tc := range []struct{ ann, want string }{
		{`stormgate.io/injct: "false"`, `annotation stormgate.io/injct: unknown; did you mean stormgate.io/inject?`},
		{`stormgate.io/hold-timout: 10s`, `annotation stormgate.io/hold-timout: unknown; did you mean stormgate.io/hold-timeout?`},
		{`stormgate.io/upstream-con: "2"`, `did you mean stormgate.io/upstream-conns?`},
		{`stormgate.io/log-format: console`, `annotation stormgate.io/log-format: log.format cannot be set per pod: an injected sidecar logs JSON`},
		{`stormgate.io/zzzzzzzz: "1"`, `annotation stormgate.io/zzzzzzzz: unknown (docs/kubernetes.md lists them; settings are stormgate.io/<section>-<field>`},
	} {
		out, _, err := Manifest(podWith(tc.ann), quiet)
		if err == nil || !strings.Contains(err.Error(), tc.want) || out != nil {
			t.Errorf("%s: err = %v, want %q", tc.ann, err, tc.want)
		}
	}
	// Other prefixes are the application's business; an opted-out pod is not checked.
	for _, ann := range []string{`example.com/stormgate: "x", app.stormgate.io/x: "1"`, `stormgate.io/inject: "false", stormgate.io/injct: "x"`} {
		if _, _, err := Manifest(podWith(ann), quiet); err != nil {
			t.Errorf("%s: %v", ann, err)
		}
	}
}

// Every setting of the schema is a per-pod annotation (stormgate.io/<section>-<field>, or its own
// older name), except the few a pod cannot choose; values go through the sidecar's own decoder and
// validation and reach it as --set.
func TestSettingsAnnotations(t *testing.T) {
	for _, f := range settings.Fields() {
		ann, ok := SettingAnnotation(f.Path)
		_, fixed := fixedInPod[f.Path]
		if ok == fixed || (ok && !strings.HasPrefix(ann, annotationPrefix)) {
			t.Errorf("%s: annotation %q %v, fixed in pod %v", f.Path, ann, ok, fixed)
		}
	}
	if a, _ := SettingAnnotation("hold.timeout"); a != "stormgate.io/hold-timeout" {
		t.Errorf("hold.timeout: %s", a)
	}
	if a, _ := SettingAnnotation("upstream.connections"); a != AnnotationUpstreamConns {
		t.Errorf("upstream.connections: %s", a)
	}

	side, _, res := sidecarOf(t, `stormgate.io/hold-timeout: 10s, stormgate.io/limits-max-frame-bytes: 16MiB, `+
		`stormgate.io/drain-readonly-policy: propagate, stormgate.io/keepalive-downstream-idle-timeout: "0"`, quiet)
	args := strings.Join(side.Args, " ")
	for _, want := range []string{"--set keepalive.downstream_idle_timeout=0", "--set hold.timeout=10s",
		"--set limits.max_frame_bytes=16MiB", "--set drain.readonly_policy=propagate"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if len(res.Warnings) > 0 {
		t.Errorf("warnings %q", res.Warnings)
	}
	// Schema order, whatever the annotations' order: re-injection gives the same bytes.
	if i, j := strings.Index(args, "keepalive."), strings.Index(args, "limits."); i > j {
		t.Errorf("args not in schema order: %q", args)
	}

	// An annotation replaces the flag's value for its path.
	side, _, _ = sidecarOf(t, `stormgate.io/hold-timeout: 5s`, Config{BacklogSysctls: ptrTo(false),
		Settings: []settings.Assignment{{Path: "hold.timeout", Value: "1s"}, {Path: "hold.max_requests", Value: "100"}}})
	if args := strings.Join(side.Args, " "); !strings.Contains(args, "--set hold.timeout=5s --set hold.max_requests=100") || strings.Contains(args, "=1s") {
		t.Errorf("flag and annotation: %q", args)
	}

	for _, tc := range []struct{ ann, want string }{
		{`stormgate.io/hold-timeout: 2h`, "annotation stormgate.io/hold-timeout (flag --set hold.timeout=...): hold.timeout: 2h is too large; must be between 0s and 1h"},
		{`stormgate.io/hold-timeout: soon`, `hold.timeout: "soon" is not a duration`},
		{`stormgate.io/hold-max-bytes: 64 MiBs`, `hold.max_bytes: "64 MiBs" is not a byte size`},
		{`stormgate.io/drain-readonly-policy: later`, `drain.readonly_policy: "later" is not one of HOLD, PROPAGATE`},
		{`stormgate.io/hold-timeout: 2h, stormgate.io/limits-max-request-age: 1h`, "hold.timeout: 2h is too large"},
	} {
		if _, _, err := Manifest(podWith(tc.ann), quiet); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.ann, err, tc.want)
		}
	}
	for _, cfg := range []Config{
		{Settings: []settings.Assignment{{Path: "upstream.connections", Value: "2"}}},
		{Settings: []settings.Assignment{{Path: "log.format", Value: "console"}}},
	} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--set "+cfg.Settings[0].Path) {
			t.Errorf("%v: %v", cfg.Settings, err)
		}
	}
}

// Issue 24: stormgate.io/inbound-ports takes container port names, as probes do.
func TestNamedInboundPorts(t *testing.T) {
	pod := func(ann, ports string) []byte {
		return []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {" + ann + "}\nspec:\n  containers:\n" +
			"  - name: app\n    image: app:1\n    ports: [" + ports + "]\n  - name: other\n    image: o:1\n    ports: [{name: metrics, containerPort: 9100}]\n")
	}
	ports := `{name: dubbo, containerPort: 20880}, {name: dubbo2, containerPort: 20881}, {name: dns, containerPort: 5353, protocol: UDP}`
	for ann, want := range map[string]string{
		`stormgate.io/inbound-ports: dubbo`:         "20880",
		`stormgate.io/inbound-ports: "dubbo,20881"`: "20880,20881",
		`stormgate.io/inbound-ports: " dubbo2 "`:    "20881",
	} {
		out, res, err := Manifest(pod(ann+`, stormgate.io/backlog-sysctls: "false"`, ports), Config{})
		if err != nil {
			t.Fatalf("%s: %v", ann, err)
		}
		p := decodeAll(t, out)[0]
		if got := strings.Join(p.spec.InitContainers[0].Args, " "); !strings.Contains(got, "--inbound-ports "+want+" ") || len(res[0].Warnings) > 0 {
			t.Errorf("%s: init args %q, warnings %q", ann, got, res[0].Warnings)
		}
	}
	for ann, want := range map[string]string{
		`stormgate.io/inbound-ports: dubb`: `no container declares a TCP port named "dubb" (named ports: dubbo=20880, dubbo2=20881, metrics=9100)`,
		`stormgate.io/inbound-ports: dns`:  `no container declares a TCP port named "dns"`,
	} {
		if _, _, err := Manifest(pod(ann, ports), quiet); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", ann, err, want)
		}
	}
	amb := `{name: dubbo, containerPort: 20880}`
	in := []byte(strings.Replace(string(pod(`stormgate.io/inbound-ports: dubbo`, amb)), "{name: metrics, containerPort: 9100}", "{name: dubbo, containerPort: 20990}", 1))
	if _, _, err := Manifest(in, quiet); err == nil || !strings.Contains(err.Error(), `port name "dubbo" is [20880 20990] in different containers`) {
		t.Errorf("ambiguous name: %v", err)
	}
}

// Issue 24: the backlog sysctls are set when asked (and taken out again on re-injection), a pod's
// own values are kept, and when nobody asked, a warning says what the cap is and how to lift it.
func TestBacklogSysctls(t *testing.T) {
	_, pod, res := sidecarOf(t, `stormgate.io/backlog-sysctls: "true"`, Config{})
	sc := pod.spec.SecurityContext
	if sc == nil || len(sc.Sysctls) != 2 || sc.Sysctls[0] != (corev1.Sysctl{Name: "net.core.somaxconn", Value: "65535"}) ||
		sc.Sysctls[1] != (corev1.Sysctl{Name: "net.ipv4.tcp_max_syn_backlog", Value: "65535"}) || len(res.Warnings) > 0 {
		t.Fatalf("asked: security context %+v, warnings %q", sc, res.Warnings)
	}
	// They follow listener.backlog, and re-injection removes exactly what it added.
	out, _, err := Manifest(podWith(`stormgate.io/backlog-sysctls: "true", stormgate.io/listener-backlog: "20000"`), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p := decodeAll(t, out)[0]; p.spec.SecurityContext.Sysctls[0].Value != "20000" {
		t.Errorf("listener.backlog 20000: %+v", p.spec.SecurityContext.Sysctls)
	}
	again, res2, err := Manifest(out, Config{})
	if err != nil || string(again) != string(out) || res2[0].Action != ActionAlreadyInjected {
		t.Errorf("re-injection: %v %v\n%s", res2, err, again)
	}
	declined, _, err := Manifest([]byte(strings.Replace(string(out), `stormgate.io/backlog-sysctls: "true"`, `stormgate.io/backlog-sysctls: "false"`, 1)), Config{})
	if err != nil || strings.Contains(string(declined), "somaxconn") || strings.Contains(string(declined), "securityContext:\n      sysctls") {
		t.Errorf("re-injected with \"false\": %v\n%s", err, declined)
	}

	// The pod's own values stay; a lower one is reported.
	own := []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {stormgate.io/backlog-sysctls: \"true\"}\nspec:\n" +
		"  securityContext: {sysctls: [{name: net.core.somaxconn, value: \"1024\"}]}\n  containers:\n  - name: app\n    image: app:1\n    ports: [{containerPort: 20880}]\n")
	out, res3, err := Manifest(own, Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := decodeAll(t, out)[0]
	if got := p.spec.SecurityContext.Sysctls; len(got) != 2 || got[0].Value != "1024" || got[1].Name != "net.ipv4.tcp_max_syn_backlog" ||
		!slices.ContainsFunc(res3[0].Warnings, func(w string) bool {
			return strings.Contains(w, "the pod sets net.core.somaxconn=1024, below listener.backlog 65535")
		}) {
		t.Errorf("own sysctl: %+v %q", got, res3[0].Warnings)
	}
	restored := p.spec.DeepCopy()
	if err := uninject(p.meta.DeepCopy(), restored); err != nil || len(restored.SecurityContext.Sysctls) != 1 {
		t.Errorf("uninject kept %+v (%v), want the pod's own sysctl only", restored.SecurityContext, err)
	}

	// Not asked: a warning with the fix. Declined: none.
	_, _, res = sidecarOf(t, "", Config{})
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "listen backlog capped at 4096") ||
		!strings.Contains(res.Warnings[0], `stormgate.io/backlog-sysctls: "true"`) || !strings.Contains(res.Warnings[0], "--allowed-unsafe-sysctls=net.core.somaxconn,net.ipv4.tcp_max_syn_backlog") {
		t.Errorf("not asked: %q", res.Warnings)
	}
	if _, _, res = sidecarOf(t, `stormgate.io/backlog-sysctls: "false"`, Config{}); len(res.Warnings) > 0 {
		t.Errorf("declined: %q", res.Warnings)
	}
	if _, _, err := Manifest(podWith(`stormgate.io/backlog-sysctls: "maybe"`), Config{}); err == nil || !strings.Contains(err.Error(), AnnotationBacklogSysctls) {
		t.Errorf("bad value: %v", err)
	}
}
