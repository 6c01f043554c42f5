package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// execute runs the sidecar CLI in-process with args and returns its stdout,
// stderr and error.
func execute(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), errOut.String(), err
}

// busyPort holds a loopback port for the test and returns its address.
func busyPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

func TestVersionFlag(t *testing.T) {
	out, _, err := execute(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	if out != versionLine()+"\n" || !strings.HasPrefix(out, "stormgate ") {
		t.Fatalf("--version printed %q", out)
	}
	out2, _, err := execute(t, "version")
	if err != nil || !strings.HasPrefix(out2, out) {
		t.Fatalf("`sidecar version` should start with the --version line: %q, %v", out2, err)
	}
}

// `run --xds` without a node id must fail before anything is bound: here the
// --listen port is taken, so an attempt to bind would fail with a different
// error.
func TestRunXDSWithoutNodeIDFailsFirst(t *testing.T) {
	t.Setenv("POD_NAME", "")
	t.Setenv("POD_NAMESPACE", "")
	busy := busyPort(t)
	_, _, err := execute(t, "run", "--xds", "127.0.0.1:1", "--listen", busy, "--metrics", "", "--admin", busy)
	if err == nil || !strings.Contains(err.Error(), "--node-id") || strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("want the missing node id before any bind, got %v", err)
	}
	if !strings.HasPrefix(err.Error(), "--xds 127.0.0.1:1: ") {
		t.Fatalf("error should name --xds: %v", err)
	}
}

func TestRunConfigErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	busy := busyPort(t) // never reached: each case fails before binding
	cases := []struct{ path, want string }{
		{filepath.Join(dir, "missing.yaml"), "missing.yaml: no such file or directory"},
		{write("typo.yaml", "hold:\n  timout: 5s\n"), "hold.timout: unknown field; did you mean timeout? (" + dir + "/typo.yaml line 2)"},
		{write("range.yaml", "log:\n  level: info\nupstream:\n  connections: 0\n"),
			"upstream.connections: 0 is too small; must be between 1 and 64 (" + dir + "/range.yaml line 4)"},
	}
	for _, c := range cases {
		_, _, err := execute(t, "run", "--config", c.path, "--listen", busy, "--metrics", "", "--admin", "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--config %s: got %v, want it to contain %q", filepath.Base(c.path), err, c.want)
		}
	}
	// A bad flag value is not blamed on the file.
	ok := write("ok.yaml", "upstream:\n  connections: 2\n")
	_, _, err := execute(t, "run", "--config", ok, "--upstream-conns", "0", "--listen", busy, "--metrics", "", "--admin", "")
	if err == nil || !strings.Contains(err.Error(), "upstream.connections: 0 is too small") || strings.Contains(err.Error(), "ok.yaml") {
		t.Errorf("flag error: %v", err)
	}
}

func TestRunListenClashNamesTheSetting(t *testing.T) {
	busy := busyPort(t)
	_, port, _ := net.SplitHostPort(busy)
	_, _, err := execute(t, "run", "--listen", busy, "--upstream", "127.0.0.1:1", "--metrics", "", "--admin", "")
	if err == nil || !strings.HasPrefix(err.Error(), "--listen "+busy+": ") ||
		!strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "sport = :"+port) {
		t.Fatalf("port clash: %v", err)
	}
	cfg := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(cfg, []byte("listener:\n  address: "+busy+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = execute(t, "run", "--config", cfg, "--upstream", "127.0.0.1:1", "--metrics", "", "--admin", "")
	if err == nil || !strings.HasPrefix(err.Error(), "listener.address "+busy+" (from "+cfg+"; --listen overrides it): ") {
		t.Fatalf("port clash from the file: %v", err)
	}
}

func TestLoggingEndpointChangesOnlyOnPOST(t *testing.T) {
	level := zap.NewAtomicLevelAt(zap.InfoLevel)
	h := loggingHandler(level, zap.NewNop())
	do := func(method, target string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(method, target, nil))
		return rec
	}
	if rec := do(http.MethodGet, "/logging"); rec.Code != 200 || rec.Body.String() != "level: info\n" {
		t.Fatalf("GET: %d %q", rec.Code, rec.Body)
	}
	if rec := do(http.MethodGet, "/logging?level=debug"); rec.Code != http.StatusMethodNotAllowed || level.Level() != zap.InfoLevel ||
		!strings.Contains(rec.Body.String(), "POST /logging?level=debug") {
		t.Fatalf("GET with level must not change it: %d %q, level %s", rec.Code, rec.Body, level.Level())
	}
	if rec := do(http.MethodPost, "/logging?level=debug"); rec.Code != 200 || level.Level() != zap.DebugLevel ||
		rec.Body.String() != "level: debug (was info)\n" {
		t.Fatalf("POST: %d %q, level %s", rec.Code, rec.Body, level.Level())
	}
	if rec := do(http.MethodPost, "/logging?level=loud"); rec.Code != http.StatusBadRequest || level.Level() != zap.DebugLevel {
		t.Fatalf("POST bad level: %d %q", rec.Code, rec.Body)
	}
	if rec := do(http.MethodDelete, "/logging"); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE: %d", rec.Code)
	}
}

// JSON logs: ISO-8601 UTC timestamps and durations with units ("1s"), not
// epoch floats and bare numbers.
func TestJSONLogFormat(t *testing.T) {
	cfg, err := loggerConfig("info", "json")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(cfg.EncoderConfig), zapcore.AddSync(&buf), cfg.Level))
	log.Info("admission: listening", zap.Duration("max_wait", time.Second), zap.Duration("backoff", 50*time.Millisecond))
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	ts, _ := m["ts"].(string)
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(ts) {
		t.Errorf("ts %v: want ISO-8601 UTC like 2026-01-02T03:04:05.678Z", m["ts"])
	}
	if m["max_wait"] != "1s" || m["backoff"] != "50ms" {
		t.Errorf("durations %v %v: want \"1s\" and \"50ms\"", m["max_wait"], m["backoff"])
	}
}

func TestDemoRates(t *testing.T) {
	prev := demoCounts{hbStormgate: 1000, hbProvider: 0, ok: 500}
	cur := demoCounts{hbStormgate: 3000, hbProvider: 0, ok: 1500}
	r := cur.ratesSince(prev, 2*time.Second)
	if r.hbStormgate != 1000 || r.hbProvider != 0 || r.ok != 500 {
		t.Fatalf("rates %+v", r)
	}
}

// `sidecar validate` reports three independent mistakes of one file in one
// run, and takes a directory.
func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("admission:\n  accept_rate: fast\nupstream:\n  connections: 0\nhold:\n  timout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yml")
	if err := os.WriteFile(good, []byte("hold:\n  timeout: 2s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".editor-swap.yaml"), []byte("{{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := execute(t, "validate", dir)
	if err == nil || err.Error() != "1 of 2 files invalid" {
		t.Fatalf("validate DIR: %v", err)
	}
	if out != good+": ok\n" {
		t.Errorf("stdout %q", out)
	}
	want := bad + `: admission.accept_rate: "fast" is not a number (line 2)` + "\n" +
		bad + `: upstream.connections: 0 is too small; must be between 1 and 64 (line 4)` + "\n" +
		bad + `: hold.timout: unknown field; did you mean timeout? (line 6)` + "\n"
	if errOut != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", errOut, want)
	}
	if _, _, err := execute(t, "validate", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no *.yaml") {
		t.Errorf("empty dir: %v", err)
	}
}
