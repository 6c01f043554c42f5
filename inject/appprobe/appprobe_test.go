package appprobe

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func port(t *testing.T, addr net.Addr) int { return addr.(*net.TCPAddr).Port }

// TestTCPProbeFollowsTheApplication: the probe passes while something listens on the port and fails
// (503, with the reason) once it is gone.
func TestTCPProbeFollowsTheApplication(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := port(t, ln.Addr())
	h := NewHandler(Set{Path("provider", Liveness): {TCPSocket: &TCPSocket{Port: p}}})
	if code, body := get(t, h, "/app-health/provider/livez"); code != 200 || !strings.Contains(body, "tcp 127.0.0.1:"+strconv.Itoa(p)) {
		t.Fatalf("listening: %d %q", code, body)
	}
	ln.Close()
	if code, body := get(t, h, "/app-health/provider/livez"); code != 503 || !strings.Contains(body, "connection refused") {
		t.Fatalf("closed: %d %q", code, body)
	}
	if code, _ := get(t, h, "/app-health/provider/readyz"); code != 404 {
		t.Fatalf("unknown probe: %d", code)
	}
}

// TestHTTPProbe: path, headers (Host included) reach the application; 2xx and 3xx pass, 5xx fails.
func TestHTTPProbe(t *testing.T) {
	status := http.StatusOK
	var gotHost, gotHeader, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotHost, gotHeader, gotPath = r.Host, r.Header.Get("X-Probe"), r.URL.Path
		if status == http.StatusFound {
			http.Redirect(w, r, "http://elsewhere.example/", status)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	p := port(t, srv.Listener.Addr())
	h := NewHandler(Set{Path("app", Readiness): {HTTPGet: &HTTPGet{Path: "/ready", Port: p,
		HTTPHeaders: []Header{{"X-Probe", "kubelet"}, {"Host", "app.local"}}}}})
	for _, tc := range []struct{ status, want int }{{200, 200}, {204, 200}, {302, 200}, {500, 503}, {404, 503}} {
		status = tc.status
		code, body := get(t, h, "/app-health/app/readyz")
		if code != tc.want {
			t.Errorf("application answers %d: probe %d %q, want %d", tc.status, code, body, tc.want)
		}
	}
	if gotHost != "app.local" || gotHeader != "kubelet" || gotPath != "/ready" {
		t.Errorf("request host %q header %q path %q", gotHost, gotHeader, gotPath)
	}
}

func TestHTTPSProbeSkipsVerification(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	h := NewHandler(Set{Path("app", Startup): {HTTPGet: &HTTPGet{Path: "/", Port: port(t, srv.Listener.Addr()), Scheme: "HTTPS"}}})
	if code, body := get(t, h, "/app-health/app/startupz"); code != 200 {
		t.Fatalf("https probe: %d %q", code, body)
	}
}

func TestParse(t *testing.T) {
	set, err := Parse(`{"/app-health/a/livez":{"tcpSocket":{"port":20880},"timeoutSeconds":2}}`)
	if err != nil || set["/app-health/a/livez"].TCPSocket.Port != 20880 || set["/app-health/a/livez"].TimeoutSeconds != 2 {
		t.Fatalf("%+v %v", set, err)
	}
	if set, err := Parse(""); err != nil || len(set) != 0 {
		t.Fatalf("empty: %v %v", set, err)
	}
	for _, bad := range []string{
		`{`, `{"/x":{"tcpSocket":{"port":1}}}`, `{"/app-health/a/livez":{}}`,
		`{"/app-health/a/livez":{"tcpSocket":{"port":0}}}`, `{"/app-health/a/livez":{"httpGet":{"port":70000}}}`,
		`{"/app-health/a/livez":{"httpGet":{"port":80,"scheme":"FTP"}}}`, `{"/app-health/a/livez":{"exec":{}}}`,
		`{"/app-health/a/livez":{"tcpSocket":{"port":1},"httpGet":{"port":1}}}`,
	} {
		if _, err := Parse(bad); err == nil || !strings.Contains(err.Error(), EnvVar) {
			t.Errorf("Parse(%s): err %v", bad, err)
		}
	}
	js, err := Set{Path("b", Liveness): {TCPSocket: &TCPSocket{Port: 1}}, Path("a", Liveness): {TCPSocket: &TCPSocket{Port: 2}}}.Encode()
	if err != nil || js != `{"/app-health/a/livez":{"tcpSocket":{"port":2}},"/app-health/b/livez":{"tcpSocket":{"port":1}}}` {
		t.Fatalf("Encode: %s %v", js, err)
	}
}
