package webhook

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/stormgate/stormgate/e2e/testcerts"
	"github.com/stormgate/stormgate/inject"
	"github.com/stormgate/stormgate/xds/controlplane"
)

var testConfig = inject.Config{Version: "1.2.3", Image: "registry.example/stormgate:test"}

// server is the webhook behind real TLS, and a client that trusts it the way the API server does
// (the configuration's caBundle).
type server struct {
	url    string
	client *http.Client
	reg    *prometheus.Registry
}

func startServer(t *testing.T, cfg Config) *server {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "webhook-ca")
	cert, key := ca.Server(t, dir, "webhook", "127.0.0.1")
	tc, err := controlplane.TLS(controlplane.TLSConfig{Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	h, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, h)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = tc
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pem, err := os.ReadFile(ca.Path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &server{url: srv.URL + Path, reg: reg, client: &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}
}

// review sends pod (JSON) as a CREATE AdmissionReview and returns the response.
func (s *server) review(t *testing.T, pod []byte, op admissionv1.Operation) *admissionv1.AdmissionResponse {
	t.Helper()
	req := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("uid-" + t.Name()), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: "shop",
			Operation: op, Object: runtime.RawExtension{Raw: pod},
		},
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.client.Post(s.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("webhook answered %d: %s", resp.StatusCode, b)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &out); err != nil || out.Response == nil {
		t.Fatalf("response %s: %v", b, err)
	}
	if out.Response.UID != req.Request.UID || out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
		t.Fatalf("response does not answer the request: %s", b)
	}
	return out.Response
}

// apply applies a response's patch to pod the way the API server does (evanphx/json-patch).
func apply(t *testing.T, pod []byte, resp *admissionv1.AdmissionResponse) []byte {
	t.Helper()
	if resp.Patch == nil {
		return pod
	}
	if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("patch type %v", resp.PatchType)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatalf("patch does not decode: %v\n%s", err, resp.Patch)
	}
	out, err := p.Apply(pod)
	if err != nil {
		t.Fatalf("patch does not apply: %v\n%s", err, resp.Patch)
	}
	return out
}

// pods returns the pods of inject's test manifests as Pod YAML documents: bare Pods as they are, and the
// template of each Deployment and StatefulSet as the Pod its controller would create.
func pods(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "*.yaml"))
	for _, f := range files {
		if strings.Contains(f, "golden") || strings.Contains(f, "injected") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var h struct{ Kind string }
			if yaml.Unmarshal([]byte(doc), &h) != nil {
				continue
			}
			var pod corev1.Pod
			switch h.Kind {
			case "Pod":
				if err := yaml.UnmarshalStrict([]byte(doc), &pod); err != nil {
					t.Fatal(err)
				}
			case "Deployment", "StatefulSet":
				var d struct {
					Metadata metav1.ObjectMeta
					Spec     struct{ Template corev1.PodTemplateSpec }
				}
				if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
					t.Fatal(err)
				}
				pod.ObjectMeta, pod.Spec = d.Spec.Template.ObjectMeta, d.Spec.Template.Spec
				pod.GenerateName = d.Metadata.Name + "-"
			default:
				continue
			}
			pod.APIVersion, pod.Kind = "v1", "Pod"
			y, err := yaml.Marshal(&pod)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(f)+"/"+pod.GenerateName+pod.Name] = y
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %d pods in ../testdata", len(out))
	}
	return out
}

// cli is what `sidecar inject` makes of a Pod YAML document, as JSON.
func cli(t *testing.T, podYAML []byte, cfg inject.Config) []byte {
	t.Helper()
	out, _, err := inject.Manifest(podYAML, cfg)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func toJSON(t *testing.T, y []byte) []byte {
	t.Helper()
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// samePod compares two pods as the API server would store them.
func samePod(t *testing.T, a, b []byte) bool {
	t.Helper()
	var pa, pb corev1.Pod
	if err := json.Unmarshal(a, &pa); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(&pa)
	jb, _ := json.Marshal(&pb)
	return bytes.Equal(ja, jb)
}

// TestPatchEqualsTheCLI is issue 13's webhook acceptance: for every pod of inject's test manifests,
// the webhook's JSON patch, applied to the pod as the API server applies it, gives exactly what
// `sidecar inject` gives. Then the injected pod goes through the webhook again (no patch: same version
// and settings), and through a webhook of a newer version (the patch upgrades it exactly as the CLI).
func TestPatchEqualsTheCLI(t *testing.T) {
	s := startServer(t, Config{Inject: testConfig})
	newer := inject.Config{Version: "1.3.0", Image: "registry.example/stormgate:next"}
	sNewer := startServer(t, Config{Inject: newer})
	for name, podYAML := range pods(t) {
		t.Run(name, func(t *testing.T) {
			pod := toJSON(t, podYAML)
			resp := s.review(t, pod, admissionv1.Create)
			if !resp.Allowed {
				t.Fatalf("denied: %+v", resp.Result)
			}
			got := apply(t, pod, resp)
			want := cli(t, podYAML, testConfig)
			if !samePod(t, got, want) {
				t.Fatalf("webhook patch applied:\n%s\nsidecar inject:\n%s\npatch: %s", got, want, resp.Patch)
			}

			again := s.review(t, got, admissionv1.Create)
			if again.Patch != nil || !again.Allowed {
				t.Errorf("already injected pod: allowed %v patch %s", again.Allowed, again.Patch)
			}

			up := sNewer.review(t, got, admissionv1.Create)
			upgraded := apply(t, got, up)
			wantUp := cli(t, mustYAML(t, got), newer)
			if !samePod(t, upgraded, wantUp) {
				t.Fatalf("upgrade through the webhook:\n%s\nsidecar inject:\n%s", upgraded, wantUp)
			}
		})
	}
}

func mustYAML(t *testing.T, j []byte) []byte {
	t.Helper()
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		t.Fatal(err)
	}
	return y
}

// TestPatchKeepsWhatTheTypesDoNotKnow: a field newer than this binary's Kubernetes types, in a container
// the patch does not replace, survives (the patch touches only what injection changed).
func TestPatchKeepsWhatTheTypesDoNotKnow(t *testing.T) {
	s := startServer(t, Config{Inject: testConfig})
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"p-","namespace":"shop"},` +
		`"spec":{"futurePodField":{"x":1},"containers":[{"name":"app","image":"app:1","futureContainerField":true,` +
		`"ports":[{"containerPort":20880}],"livenessProbe":{"tcpSocket":{"port":20880},"futureProbeField":2}}]}}`)
	got := apply(t, pod, s.review(t, pod, admissionv1.Create))
	for _, want := range []string{`"futurePodField":{"x":1}`, `"futureContainerField":true`, `"futureProbeField":2`, `"name":"stormgate"`, `/app-health/app/livez`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("patched pod lacks %s:\n%s", want, got)
		}
	}
}

func TestOptOutErrorsAndOtherRequests(t *testing.T) {
	s := startServer(t, Config{Inject: testConfig})
	deny := startServer(t, Config{Inject: testConfig, DenyOnError: true})
	pod := func(meta string) []byte {
		return []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"shop"` + meta + `},` +
			`"spec":{"containers":[{"name":"app","image":"app:1","ports":[{"containerPort":20880}]}]}}`)
	}
	for _, tc := range []struct {
		name    string
		srv     *server
		pod     []byte
		op      admissionv1.Operation
		allowed bool
		patched bool
		warning string
		result  string
	}{
		{"plain", s, pod(""), admissionv1.Create, true, true, "", "injected"},
		{"label opt-out", s, pod(`,"labels":{"stormgate.io/inject":"false"}`), admissionv1.Create, true, false, "", "skipped"},
		{"annotation opt-out", s, pod(`,"annotations":{"stormgate.io/inject":"false"}`), admissionv1.Create, true, false, "", "skipped"},
		{"update", s, pod(""), admissionv1.Update, true, false, "", "skipped"},
		{"invalid annotation admitted", s, pod(`,"annotations":{"stormgate.io/upstream-conns":"100"}`), admissionv1.Create, true, false, "upstream.connections", "error"},
		{"invalid annotation denied", deny, pod(`,"annotations":{"stormgate.io/log-level":"verbose"}`), admissionv1.Create, false, false, "", "denied"},
		{"warning passed on", s, pod(`,"annotations":{"stormgate.io/xds-address":"cp.example:18000"}`), admissionv1.Create, true, true, "plaintext", "injected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := counter(t, tc.srv, tc.result)
			resp := tc.srv.review(t, tc.pod, tc.op)
			if resp.Allowed != tc.allowed || (resp.Patch != nil) != tc.patched {
				t.Fatalf("allowed %v patched %v; want %v %v (%+v)", resp.Allowed, resp.Patch != nil, tc.allowed, tc.patched, resp)
			}
			if tc.warning != "" && !strings.Contains(strings.Join(resp.Warnings, "\n"), tc.warning) {
				t.Errorf("warnings %q lack %q", resp.Warnings, tc.warning)
			}
			if !tc.allowed && (resp.Result == nil || !strings.Contains(resp.Result.Message, "log.level")) {
				t.Errorf("denial does not say why: %+v", resp.Result)
			}
			if got := counter(t, tc.srv, tc.result); got != before+1 {
				t.Errorf("stormgate_webhook_reviews_total{result=%q} went %v -> %v", tc.result, before, got)
			}
		})
	}

	// Requests it cannot read: 4xx (the configuration's failurePolicy decides), never a crash.
	for _, tc := range []struct {
		method, ctype, body string
		want                int
	}{
		{"GET", "application/json", "", 405},
		{"POST", "text/plain", "{}", 415},
		{"POST", "application/json", "not json", 400},
		{"POST", "application/json", `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`, 400},
		{"POST", "application/json", `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`, 400},
	} {
		req, _ := http.NewRequest(tc.method, s.url, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", tc.ctype)
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s %q: %d, want %d", tc.method, tc.ctype, tc.body, resp.StatusCode, tc.want)
		}
	}
}

func counter(t *testing.T, s *server, result string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "stormgate_webhook_reviews_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestNewRefusesAnInvalidConfig(t *testing.T) {
	if _, err := New(Config{Inject: inject.Config{UpstreamConns: 65}}, nil, nil); err == nil {
		t.Fatal("webhook started with upstream connections 65")
	}
}
