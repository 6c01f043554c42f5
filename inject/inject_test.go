package inject

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

// goldenConfig is what the golden files were made with (as `sidecar inject --image ...` of version 1.2.3).
var goldenConfig = Config{Version: "1.2.3", Image: "registry.example/stormgate:test"}

var goldenCases = []string{"deployment", "statefulset", "pod", "multi"}

// TestGolden compares the output for each testdata/NAME.yaml with NAME.golden.yaml, and the report
// (results and warnings) with NAME.report.golden. Run with -update to regenerate both.
func TestGolden(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			in := readFile(t, name+".yaml")
			out, results, err := Manifest(in, goldenConfig)
			if err != nil {
				t.Fatal(err)
			}
			var report strings.Builder
			for _, r := range results {
				fmt.Fprintln(&report, r)
				for _, w := range r.Warnings {
					fmt.Fprintln(&report, "  warning:", w)
				}
			}
			checkGolden(t, name+".golden.yaml", out)
			checkGolden(t, name+".report.golden", []byte(report.String()))
		})
	}
}

// TestDoubleInjectionIsNoop feeds each golden output back in: the bytes must come out identical and no
// document may be injected again. With other settings (a newer version), re-injecting the output gives
// exactly what injecting the original with those settings gives: an upgrade through the kubectl pipe.
func TestDoubleInjectionIsNoop(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			once := readFile(t, name+".golden.yaml")
			twice, results, err := Manifest(once, goldenConfig)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(once, twice) {
				t.Fatalf("second injection changed the manifest:\n%s", twice)
			}
			for _, r := range results {
				if r.Action.Changed() {
					t.Errorf("%s: injected twice", r)
				}
			}
			newer := Config{Version: "1.3.0", ProxyPort: 16000}
			upgraded, results, err := Manifest(once, newer)
			if err != nil {
				t.Fatal(err)
			}
			fresh, _, err := Manifest(readFile(t, name+".yaml"), newer)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(upgraded, fresh) {
				t.Fatalf("re-injecting with version 1.3.0 gave\n%s\nbut injecting the original with it gives\n%s", upgraded, fresh)
			}
			for _, r := range results {
				if r.Action == ActionInjected || r.Action == ActionAlreadyInjected {
					t.Errorf("%s: want updated (or untouched)", r)
				}
				if r.Action == ActionUpdated && !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "version 1.2.3 -> 1.3.0") }) {
					t.Errorf("%s: warnings %q do not say which versions", r, r.Warnings)
				}
			}
		})
	}
}

// TestUpgradeFromPreviousRelease re-injects what the previous release's inject wrote (separate init
// image with iptables, `injected: "true"`): the result is what this release writes for the original.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	prev := readFile(t, "deployment.prev-injected.yaml")
	// The previous release's output, with this release's TLS annotations added by hand (as an operator
	// would, to secure it while upgrading).
	prev = bytes.Replace(prev, []byte("        stormgate.io/xds-address: stormgate-control-plane.stormgate-system.svc:18000\n"),
		[]byte("        stormgate.io/xds-address: stormgate-control-plane.stormgate-system.svc:18000\n"+
			"        stormgate.io/xds-ca-secret: stormgate-xds-client\n        stormgate.io/xds-cert-secret: stormgate-xds-client\n"), 1)
	// ... and the probes (the previous release did not rewrite them, so they were plain in its output).
	in := readFile(t, "deployment.yaml")
	out, results, err := Manifest(prev, goldenConfig)
	if err != nil {
		t.Fatal(err)
	}
	if results[0].Action != ActionUpdated {
		t.Fatalf("action %s, want updated", results[0].Action)
	}
	var got, want appsv1.Deployment
	if err := yaml.UnmarshalStrict(out, &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(readFile(t, "deployment.golden.yaml"), &want); err != nil {
		t.Fatal(err)
	}
	// The application container of the previous output had no probes; take them from the input.
	var orig appsv1.Deployment
	if err := yaml.UnmarshalStrict(in, &orig); err != nil {
		t.Fatal(err)
	}
	for _, d := range []*appsv1.Deployment{&got, &want} {
		d.Spec.Template.Spec.Containers[0].LivenessProbe = nil
		d.Spec.Template.Spec.Containers[0].ReadinessProbe = nil
		d.Spec.Template.Spec.Containers[0].StartupProbe = nil
		side := &d.Spec.Template.Spec.Containers[1]
		side.Env = slices.DeleteFunc(side.Env, func(e corev1.EnvVar) bool { return e.Name == envAppProbes })
	}
	if !sameJSON(got, want) {
		gy, _ := yaml.Marshal(got)
		wy, _ := yaml.Marshal(want)
		t.Fatalf("upgraded:\n%s\nwant:\n%s", gy, wy)
	}
}

// TestOutputParsesBack decodes every injected document strictly into its Kubernetes type and checks what
// injection promised, and that the application's own containers came through unchanged.
func TestOutputParsesBack(t *testing.T) {
	type want struct {
		inbound, proxy string
		native         bool
	}
	wants := map[string]want{
		"order-provider":  {"20880,20881", "15006", false},
		"ledger-provider": {"20880", "15006", false},
		"echo-provider":   {"20880", "15106", true},
		"cart-provider":   {"20880", "15006", false},
	}
	for _, name := range goldenCases {
		inDocs := decodeAll(t, readFile(t, name+".yaml"))
		outDocs := decodeAll(t, readFile(t, name+".golden.yaml"))
		if len(inDocs) != len(outDocs) {
			t.Fatalf("%s: %d documents in, %d out", name, len(inDocs), len(outDocs))
		}
		for i, out := range outDocs {
			in := inDocs[i]
			if out.spec == nil {
				if !bytes.Equal(in.raw, out.raw) {
					t.Errorf("%s doc %d: passed-through document changed:\n%s\nwas\n%s", name, i+1, out.raw, in.raw)
				}
				continue
			}
			w, injected := wants[out.name]
			if !injected {
				if !bytes.Equal(in.raw, out.raw) {
					t.Errorf("%s doc %d (%s): not to be injected, but changed", name, i+1, out.name)
				}
				continue
			}
			t.Run(out.name, func(t *testing.T) {
				checkInjected(t, out.meta, out.spec, w.inbound, w.proxy, w.native)
				// The application's containers are exactly as they were, but for the probes injection
				// rewrote: taking Stormgate out again gives them back (named ports as numbers).
				restored := out.spec.DeepCopy()
				if err := uninject(out.meta.DeepCopy(), restored); err != nil {
					t.Fatal(err)
				}
				appIn := in.spec.DeepCopy()
				for _, c := range appContainers(appIn) {
					for _, pr := range probesOf(c) {
						if p := *pr.probe; p != nil && p.TCPSocket != nil && p.TCPSocket.Port.Type == intstr.String {
							p.TCPSocket.Port = intstr.FromInt(resolvePort(c, p.TCPSocket.Port))
						}
					}
				}
				if !sameJSON(restored.Containers, appIn.Containers) {
					t.Errorf("application containers changed:\n%+v\nwas\n%+v", restored.Containers, appIn.Containers)
				}
				appOut := slices.DeleteFunc(slices.Clone(out.spec.Containers), isOurs)
				if len(appOut) != len(in.spec.Containers) {
					t.Errorf("application containers changed:\n%+v\nwas\n%+v", appOut, in.spec.Containers)
				}
				initOut := slices.DeleteFunc(slices.Clone(out.spec.InitContainers), func(c corev1.Container) bool {
					return c.Name == InitContainerName || c.Name == ContainerName
				})
				if len(initOut) != len(in.spec.InitContainers) || len(initOut) > 0 && !reflect.DeepEqual(initOut, in.spec.InitContainers) {
					t.Errorf("application init containers changed:\n%+v\nwas\n%+v", initOut, in.spec.InitContainers)
				}
			})
		}
	}
}

func checkInjected(t *testing.T, meta *metav1.ObjectMeta, spec *corev1.PodSpec, inbound, proxy string, native bool) {
	t.Helper()
	want := map[string]string{AnnotationInjected: "1.2.3", "prometheus.io/scrape": "true", "prometheus.io/port": "15090", "prometheus.io/path": "/metrics"}
	if app := meta.Annotations["prometheus.io/port"]; app != "15090" && app != "" {
		// The application's own scrape annotations stay as they were.
		want = map[string]string{AnnotationInjected: "1.2.3", "prometheus.io/port": app, "prometheus.io/path": meta.Annotations["prometheus.io/path"]}
	}
	for k, v := range want {
		if meta.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, meta.Annotations[k], v)
		}
	}
	if len(spec.InitContainers) == 0 || spec.InitContainers[0].Name != InitContainerName {
		t.Fatalf("first init container is not %s", InitContainerName)
	}
	ic := spec.InitContainers[0]
	if got := strings.Join(ic.Args, " "); got != "iptables --inbound-ports "+inbound+" --proxy-port "+proxy {
		t.Errorf("init args %q", got)
	}
	sc := ic.SecurityContext
	if *sc.RunAsUser != 0 || *sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || *sc.Privileged ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("init security context %+v, caps %+v", sc, sc.Capabilities)
	}

	var side *corev1.Container
	if native {
		if len(spec.InitContainers) < 2 || spec.InitContainers[1].Name != ContainerName {
			t.Fatalf("native sidecar: second init container is not %s", ContainerName)
		}
		side = &spec.InitContainers[1]
		if side.RestartPolicy == nil || *side.RestartPolicy != corev1.ContainerRestartPolicyAlways || side.StartupProbe == nil {
			t.Errorf("native sidecar lacks restartPolicy Always or a startup probe")
		}
		if slices.ContainsFunc(spec.Containers, isOurs) {
			t.Errorf("native sidecar also in containers")
		}
	} else {
		i := slices.IndexFunc(spec.Containers, isOurs)
		if i != len(spec.Containers)-1 {
			t.Fatalf("%s is not the last container (index %d)", ContainerName, i)
		}
		side = &spec.Containers[i]
	}
	args := strings.Join(side.Args, " ")
	if !strings.HasPrefix(args, "run --transparent --listen [::]:"+proxy+" --inbound-ports "+inbound+" --metrics :15090") {
		t.Errorf("sidecar args %q", args)
	}
	sc = side.SecurityContext
	if *sc.RunAsUser != SidecarUID || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation ||
		len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("sidecar security context %+v", sc)
	}
	if p := side.LivenessProbe; p == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.IntValue() != 15090 {
		t.Errorf("liveness probe %+v", p)
	}
	if p := side.ReadinessProbe; p == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.IntValue() != 15090 {
		t.Errorf("readiness probe %+v", p)
	}
	if len(side.Ports) != 1 || side.Ports[0].ContainerPort != 15090 {
		t.Errorf("ports %+v", side.Ports)
	}
	if side.Resources.Requests.Cpu().IsZero() || side.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", side.Resources)
	}
}

type decoded struct {
	raw  []byte
	name string
	meta *metav1.ObjectMeta
	spec *corev1.PodSpec
}

func decodeAll(t *testing.T, in []byte) []decoded {
	t.Helper()
	segs, err := splitDocuments(in)
	if err != nil {
		t.Fatal(err)
	}
	var out []decoded
	for _, s := range segs {
		d := decoded{raw: s.body}
		var h header
		if err := yaml.Unmarshal(s.body, &h); err != nil {
			t.Fatal(err)
		}
		d.name = h.Metadata.Name
		var err error
		switch h.Kind {
		case "Deployment":
			var o appsv1.Deployment
			err = yaml.UnmarshalStrict(s.body, &o)
			d.meta, d.spec = &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
		case "StatefulSet":
			var o appsv1.StatefulSet
			err = yaml.UnmarshalStrict(s.body, &o)
			d.meta, d.spec = &o.Spec.Template.ObjectMeta, &o.Spec.Template.Spec
		case "Pod":
			var o corev1.Pod
			err = yaml.UnmarshalStrict(s.body, &o)
			d.meta, d.spec = &o.ObjectMeta, &o.Spec
		}
		if err != nil {
			t.Fatalf("%s %s does not parse back: %v", h.Kind, h.Metadata.Name, err)
		}
		out = append(out, d)
	}
	return out
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./inject -update` to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run `go test ./inject -update` and review the diff):\n%s", name, got)
	}
}

func TestPassThroughIsByteForByte(t *testing.T) {
	in := []byte("# leading\n---\napiVersion: v1\nkind: Service\nmetadata: {name: a}   # trailing comment\n--- # sep comment\r\n\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n")
	out, results, err := Manifest(in, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatalf("output differs:\n%q\nwant\n%q", out, in)
	}
	if len(results) != 4 {
		t.Fatalf("%d results, want 4: %v", len(results), results)
	}
	for _, r := range results {
		if r.Action != ActionPassedThrough {
			t.Errorf("%s", r)
		}
	}
}

func TestInjectDecisions(t *testing.T) {
	pod := func(extra string) []byte {
		return []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n" + extra +
			"spec:\n  containers:\n  - name: app\n    image: app:1\n    ports: [{containerPort: 20880}]\n")
	}
	for _, tc := range []struct {
		name    string
		in      []byte
		action  Action
		warning string // substring of a warning
		err     string // substring of the error
	}{
		{"plain", pod(""), ActionInjected, "", ""},
		{"opted out", pod("  annotations: {stormgate.io/inject: \"false\"}\n"), ActionSkipped, "", ""},
		{"bad opt-out value", pod("  annotations: {stormgate.io/inject: \"nope\"}\n"), "", "", "stormgate.io/inject"},
		{"undeclared inbound port", pod("  annotations: {stormgate.io/inbound-ports: \"20990\"}\n"), ActionInjected, "20990 is not a containerPort", ""},
		{"bad inbound port", pod("  annotations: {stormgate.io/inbound-ports: \"20880,x\"}\n"), "", "", `no container declares a TCP port named "x"`},
		{"negative inbound port", pod("  annotations: {stormgate.io/inbound-ports: \"20880,-1\"}\n"), "", "", `no container declares a TCP port named "-1"`},
		{"empty inbound ports", pod("  annotations: {stormgate.io/inbound-ports: \",\"}\n"), "", "", "at least one port"},
		{"inbound is proxy port", pod("  annotations: {stormgate.io/inbound-ports: \"15006\"}\n"), "", "", "Stormgate's own ports"},
		{"proxy port 0", pod("  annotations: {stormgate.io/proxy-port: \"0\"}\n"), "", "", "stormgate.io/proxy-port"},
		{"proxy equals metrics", pod("  annotations: {stormgate.io/proxy-port: \"15090\"}\n"), "", "", "must differ"},
		{"bad upstream conns", pod("  annotations: {stormgate.io/upstream-conns: \"-1\"}\n"), "", "", "stormgate.io/upstream-conns"},
		{"bad quantity", pod("  annotations: {stormgate.io/memory-limit: \"lots\"}\n"), "", "", "stormgate.io/memory-limit"},
		{"request above limit", pod("  annotations: {stormgate.io/cpu-request: \"3\"}\n"), "", "", "above its limit"},
		{"bad native flag", pod("  annotations: {stormgate.io/native-sidecar: \"maybe\"}\n"), "", "", "stormgate.io/native-sidecar"},
		{"empty image", pod("  annotations: {stormgate.io/image: \"\"}\n"), "", "", "stormgate.io/image"},
		{"only the annotation", pod("  annotations: {stormgate.io/injected: \"true\"}\n"), ActionAlreadyInjected, "partly injected", ""},
		{"keeps the application's scrape port", pod("  annotations: {prometheus.io/port: \"8080\"}\n"), ActionInjected,
			"kept the application's scrape annotations (prometheus.io/port: 8080); Stormgate's metrics are on its port sg-metrics (15090)", ""},
		{"host network", []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: h}\nspec:\n  hostNetwork: true\n  containers: [{name: a, image: a}]\n"),
			ActionSkipped, "hostNetwork", ""},
		{"port clash", []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec:\n  containers: [{name: a, image: a, ports: [{containerPort: 15090}]}]\n"),
			"", "", `container "a" declares port 15090`},
		{"our container present", []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec:\n  containers: [{name: stormgate, image: x}]\n"),
			ActionAlreadyInjected, "partly injected", ""},
		{"unknown field", []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicaz: 3\n  template: {spec: {containers: []}}\n"),
			"", "", `unknown field "replicaz"`},
		{"old apiVersion", []byte("apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: d}\n"), ActionPassedThrough, "only apps/v1", ""},
		{"not yaml", []byte("apiVersion: v1\nkind: [Pod\n"), "", "", "not a Kubernetes object"},
		{"content on separator", []byte("apiVersion: v1\nkind: Service\n--- {a: 1}\n"), "", "", "line 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, results, err := Manifest(tc.in, quiet)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				if out != nil {
					t.Fatal("output returned with an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := results[len(results)-1]
			if r.Action != tc.action {
				t.Fatalf("action %q, want %q", r.Action, tc.action)
			}
			if tc.warning != "" && !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, tc.warning) }) {
				t.Fatalf("warnings %q lack %q", r.Warnings, tc.warning)
			}
			if tc.warning == "" && len(r.Warnings) > 0 {
				t.Fatalf("unexpected warnings %q", r.Warnings)
			}
			if r.Action != ActionInjected && !bytes.Equal(out, tc.in) {
				t.Fatalf("%s document changed:\n%s", r.Action, out)
			}
		})
	}
}

func TestTemplateAnnotationsOverrideWorkloadAndFlags(t *testing.T) {
	in := []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
  annotations: {stormgate.io/upstream-conns: "2", stormgate.io/log-level: warn}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata:
      labels: {a: b}
      annotations: {stormgate.io/upstream-conns: "6"}
    spec:
      containers: [{name: app, image: app, ports: [{containerPort: 20880}]}]
`)
	out, _, err := Manifest(in, Config{UpstreamConns: 3, LogLevel: "info", Image: "flag-image:1"})
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(out, &d); err != nil {
		t.Fatal(err)
	}
	side := d.Spec.Template.Spec.Containers[1]
	args := strings.Join(side.Args, " ")
	for _, want := range []string{"--upstream-conns 6", "--log-level warn"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if side.Image != "flag-image:1" {
		t.Errorf("image %q, want the flag's", side.Image)
	}
	// The workload's annotations stay on the workload: only the template gains ours.
	if _, ok := d.Annotations[AnnotationInjected]; ok {
		t.Error("injected annotation written on the workload, want the pod template")
	}
}

func TestConfigIsNotMutated(t *testing.T) {
	req, lim := DefaultResources()
	cfg := Config{Requests: req, Limits: lim}
	in := []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {stormgate.io/cpu-request: 1m, stormgate.io/memory-limit: 2Gi}\nspec:\n  containers: [{name: a, image: a}]\n")
	if _, _, err := Manifest(in, cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Requests.Cpu().String() != "100m" || cfg.Limits.Memory().String() != "1Gi" {
		t.Fatalf("annotations wrote into the caller's Config: %v %v", cfg.Requests, cfg.Limits)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	for _, c := range []Config{
		{InboundPorts: []uint16{15000}},
		{MetricsPort: AdminPort},
		{UpstreamConns: -1},
		{InboundPorts: []uint16{0}},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: valid, want an error", c)
		}
		if _, _, err := Manifest([]byte("kind: Service\n"), c); err == nil {
			t.Errorf("%+v: Manifest accepted an invalid Config", c)
		}
	}
}

// TestDeployExampleUpToDate keeps deploy/examples/provider.injected.yaml equal to what `sidecar inject`
// of the release in VERSION (default flags) makes of deploy/examples/provider.yaml.
func TestDeployExampleUpToDate(t *testing.T) {
	dir := filepath.Join("..", "deploy", "examples")
	in, err := os.ReadFile(filepath.Join(dir, "provider.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	release, err := os.ReadFile(filepath.Join("..", "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	out, results, err := Manifest(in, Config{Version: strings.TrimSpace(string(release))})
	if err != nil {
		t.Fatal(err)
	}
	if results[0].Action != ActionInjected || len(results[0].Warnings) > 0 {
		t.Fatalf("example: %v %q", results[0], results[0].Warnings)
	}
	path := filepath.Join(dir, "provider.injected.yaml")
	if *update {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(out, want) {
		t.Fatalf("%s is stale or missing (%v): run `go test ./inject -update`", path, err)
	}
}

// FuzzManifest: whatever the input, Manifest does not panic, and when it succeeds its output is a fixed
// point (injecting it again returns it unchanged).
func FuzzManifest(f *testing.F) {
	for _, name := range goldenCases {
		b, err := os.ReadFile(filepath.Join("testdata", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("---\n--- # x\n\n---\nkind: Pod\napiVersion: v1\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, _, err := Manifest(in, Config{})
		if err != nil {
			return
		}
		again, _, err := Manifest(out, Config{})
		if err != nil {
			t.Fatalf("output of a successful injection does not inject again: %v\n%s", err, out)
		}
		if !bytes.Equal(out, again) {
			t.Fatalf("not idempotent:\n%s\nthen\n%s", out, again)
		}
	})
}

// The pod's labels reach `sidecar run` (and from there the control plane's selectors) through the
// downward API: expanding the variables as the kubelet does gives back every label.
func TestXDSLabelEnv(t *testing.T) {
	labels := map[string]string{"app": "payment", "track": "canary", "app.kubernetes.io/version": "1.2.3"}
	env := xdsLabelEnv(labels)
	vals := map[string]string{}
	var joined string
	for _, e := range env {
		switch {
		case e.ValueFrom != nil:
			path := e.ValueFrom.FieldRef.FieldPath // metadata.labels['key']
			key := strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")
			if path != "metadata.labels['"+key+"']" {
				t.Fatalf("field path %q", path)
			}
			vals["$("+e.Name+")"] = labels[key]
		case e.Name == EnvPodLabels:
			joined = e.Value
		}
	}
	for ref, v := range vals {
		joined = strings.ReplaceAll(joined, ref, v)
	}
	if joined != "app=payment,app.kubernetes.io/version=1.2.3,track=canary" {
		t.Fatalf("%s expands to %q", EnvPodLabels, joined)
	}
	if xdsLabelEnv(nil) != nil {
		t.Errorf("no labels, no variables")
	}
}
