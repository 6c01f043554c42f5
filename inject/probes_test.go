package inject

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/inject/appprobe"
)

// TestRewrittenProbeTestsTheProvider is the whole loop: inject a pod whose liveness probe is a
// tcpSocket probe on the provider port; the kubelet would now call the sidecar's /app-health path, and
// the sidecar's handler, built from the injected environment variable, passes while the provider
// listens and fails once it is dead (the original probe, redirected to Stormgate, would have passed).
func TestRewrittenProbeTestsTheProvider(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	in := []byte(`apiVersion: v1
kind: Pod
metadata: {name: p, annotations: {stormgate.io/inbound-ports: "` + port + `"}}
spec:
  containers:
  - name: provider
    image: app:1
    ports: [{name: dubbo, containerPort: ` + port + `}, {name: http, containerPort: 8080}]
    livenessProbe: {tcpSocket: {port: dubbo}, periodSeconds: 7, failureThreshold: 4, timeoutSeconds: 2}
    readinessProbe: {httpGet: {path: /ready, port: 8080}}
    startupProbe: {exec: {command: [/bin/true]}}
`)
	out, res, err := Manifest(in, Config{})
	if err != nil || res[0].Action != ActionInjected {
		t.Fatalf("%v %v", res, err)
	}
	pod := decodeAll(t, out)[0]
	app, side := pod.spec.Containers[0], pod.spec.Containers[1]
	lp := app.LivenessProbe
	if lp.HTTPGet == nil || lp.HTTPGet.Path != "/app-health/provider/livez" || lp.HTTPGet.Port.IntValue() != DefaultMetricsPort ||
		lp.PeriodSeconds != 7 || lp.FailureThreshold != 4 || lp.TimeoutSeconds != 2 || lp.TCPSocket != nil {
		t.Fatalf("liveness probe not rewritten to the sidecar: %+v", lp)
	}
	if rp := app.ReadinessProbe; rp.HTTPGet == nil || rp.HTTPGet.Port.IntValue() != 8080 {
		t.Errorf("readiness probe on a port that is not redirected was changed: %+v", rp)
	}
	if sp := app.StartupProbe; sp.Exec == nil {
		t.Errorf("exec probe changed: %+v", sp)
	}
	var env string
	for _, e := range side.Env {
		if e.Name == appprobe.EnvVar {
			env = e.Value
		}
	}
	set, err := appprobe.Parse(env)
	if err != nil || len(set) != 1 {
		t.Fatalf("%s = %q: %v", appprobe.EnvVar, env, err)
	}
	h := appprobe.NewHandler(set)
	probe := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, lp.HTTPGet.Path, nil))
		return rec.Code
	}
	if code := probe(); code != 200 {
		t.Fatalf("provider listening: probe %d", code)
	}
	ln.Close()
	if code := probe(); code != 503 {
		t.Fatalf("provider gone: probe %d, want 503", code)
	}
}

func TestProbeRewriteWarnings(t *testing.T) {
	in := []byte(`apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: provider
    image: app:1
    ports: [{containerPort: 20880}]
    livenessProbe: {grpc: {port: 20880}}
    readinessProbe: {tcpSocket: {port: 20880, host: db.example}}
`)
	out, res, err := Manifest(in, Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(res[0].Warnings, "\n")
	for _, want := range []string{`"provider" liveness probe is a gRPC probe on redirected port 20880`, `"provider" readiness probe names host db.example`} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q lack %q", w, want)
		}
	}
	app := decodeAll(t, out)[0].spec.Containers[0]
	if app.LivenessProbe.GRPC == nil || app.ReadinessProbe.TCPSocket == nil {
		t.Errorf("probes were changed: %+v %+v", app.LivenessProbe, app.ReadinessProbe)
	}
	for _, e := range decodeAll(t, out)[0].spec.Containers[1].Env {
		if e.Name == appprobe.EnvVar {
			t.Errorf("%s set though nothing was rewritten", e.Name)
		}
	}
}
