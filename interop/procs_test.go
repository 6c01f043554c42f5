package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/childproc"
)

var (
	keepBins        = flag.Bool("interop.keep-bins", false, "keep the built binaries (their directory is printed)")
	restartMetadata = flag.String("interop.restart-metadata", "off",
		"dgprovider --metadata-service for the restart scenarios: off (the port opens with Greeter exported) or "+
			"same-port (dubbo-go's default: the port answers \"don't have this exporter\" for a moment after it opens)")
)

// bins are the executables TestMain builds; sidecarErr is set instead of bins.sidecar when the main module's
// sidecar does not build, so only the tests that need it fail.
var bins struct {
	dir, provider, consumer, grpc, sidecar string
	sidecarErr                             error
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "stormgate-interop-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if *keepBins {
		fmt.Fprintln(os.Stderr, "interop: binaries in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bins.dir = dir
	bins.provider = filepath.Join(dir, "dgprovider")
	bins.consumer = filepath.Join(dir, "dgconsumer")
	bins.grpc = filepath.Join(dir, "grpcinterop")

	start := time.Now()
	if out, err := goBuild(".", dir, "./cmd/dgprovider", "./cmd/dgconsumer", "./cmd/grpcinterop"); err != nil {
		fmt.Fprintf(os.Stderr, "interop: building the dubbo-go peers: %v\n%s", err, out)
		return 1
	}
	peersBuilt := time.Since(start)

	if p := os.Getenv("STORMGATE_SIDECAR"); p != "" {
		bins.sidecar = p // prebuilt by the caller (interop/run.sh, make)
	} else {
		out, err := goBuild("..", filepath.Join(dir, "sidecar"), "./cmd/sidecar")
		if err != nil {
			bins.sidecarErr = fmt.Errorf("go build ./cmd/sidecar in the main module: %v\n%s", err, out)
		} else {
			bins.sidecar = filepath.Join(dir, "sidecar")
		}
	}
	fmt.Fprintf(os.Stderr, "interop: built dubbo-go peers in %v, sidecar in %v\n",
		peersBuilt.Round(time.Millisecond), (time.Since(start) - peersBuilt).Round(time.Millisecond))
	return m.Run()
}

func goBuild(dir, out string, pkgs ...string) ([]byte, error) {
	gobin := "go"
	if g := os.Getenv("GO"); g != "" {
		gobin = g
	}
	cmd := exec.Command(gobin, append([]string{"build", "-o", out}, pkgs...)...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

func requireSidecar(t *testing.T) {
	t.Helper()
	if bins.sidecarErr != nil {
		t.Fatal(bins.sidecarErr)
	}
}

// proc is one child process whose output lines are kept; waitLine reads its stdout on from the last match.
type proc struct {
	*childproc.Proc
	seen int // lines waitLine has read past
}

// startProc starts bin with args. t.Cleanup kills and reaps it if it still runs, and logs its stderr if the
// test failed.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	cp, err := childproc.Start(context.Background(), childproc.Spec{Name: name, Argv: append([]string{bin}, args...), Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{Proc: cp}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			lines := p.Tail(200)
			t.Logf("%s (%v) stderr, last %d lines:\n%s", name, p.Err(), len(lines), strings.Join(lines, "\n"))
		}
	})
	return p
}

// waitLine returns the next stdout line for which match is true, skipping others.
func (p *proc) waitLine(timeout time.Duration, match func(string) bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	l, err := p.WaitLineAfter(ctx, &p.seen, func(l childproc.Line) bool { return !l.Stderr && match(l.Text) })
	switch {
	case errors.Is(err, childproc.ErrExited):
		return "", fmt.Errorf("%s exited (%v) before the expected line", p.Name, p.Err())
	case err != nil:
		return "", fmt.Errorf("%s: no expected line within %v", p.Name, timeout)
	}
	return l.Text, nil
}

// wait returns once the process exits, or fails the test after timeout.
func (p *proc) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(timeout):
		t.Fatalf("%s still running after %v", p.Name, timeout)
	}
}

// stderrText is the process's stderr so far.
func (p *proc) stderrText() string { return strings.Join(p.Lines(true), "\n") }

// freePort returns a TCP port that was free on all interfaces a moment ago. The peers need fixed ports (a
// provider restarts on the same one), and ports handed out by the kernel for port 0 come from the ephemeral
// range, where a busy machine's outgoing connections can take them before the peer binds: so pick at random
// below that range, and fall back to port 0 only if the range leaves no room.
func freePort(t *testing.T) int {
	t.Helper()
	lo, hi := 20000, ephemeralLow()
	for range 100 {
		if hi-lo < 1000 {
			break
		}
		port := lo + rand.IntN(hi-lo)
		if ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port)); err == nil {
			ln.Close()
			return port
		}
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 if unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}

// provider is a running dgprovider.
type provider struct {
	*proc
	port int
}

// startProvider starts dgprovider on port and waits for its READY line. With port 0 it picks a free port, and
// another if that one was taken before the provider could bind it.
func startProvider(t *testing.T, port int, extra ...string) *provider {
	t.Helper()
	return startServer(t, "dgprovider", bins.provider, port, nil, extra...)
}

// startServer is startProvider for any server binary that takes --port and prints "READY <port>": its
// arguments are prefix, --port, extra.
func startServer(t *testing.T, name, bin string, port int, prefix []string, extra ...string) *provider {
	t.Helper()
	attempts := 1
	if port == 0 {
		attempts = 3
	}
	var err error
	for range attempts {
		p := port
		if p == 0 {
			p = freePort(t)
		}
		args := append(append(slices.Clone(prefix), "--port", strconv.Itoa(p)), extra...)
		pr := startProc(t, name+":"+strconv.Itoa(p), bin, args...)
		want := "READY " + strconv.Itoa(p)
		if _, err = pr.waitLine(30*time.Second, func(l string) bool { return l == want }); err == nil {
			return &provider{proc: pr, port: p}
		}
		pr.Kill()
		t.Logf("provider on port %d did not start: %v: %s", p, err, lastLine(pr.stderrText()))
	}
	t.Fatal(err)
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// sidecar is a running `sidecar run`.
type sidecar struct {
	*proc
	listen, metrics, admin string
	listenPort             int
}

// startSidecar runs `sidecar run` in front of the provider on upstreamPort with upstreamConns connections and
// waits until /readyz answers 200 and all upstream connections are up. extra are more `sidecar run` arguments.
// Its ports come from freePort, which cannot reserve them: when one was taken before the sidecar bound it (a
// provider of a parallel test restarting, say), the sidecar starts again on other ports, up to three times.
func startSidecar(t *testing.T, upstreamPort int, extra ...string) *sidecar {
	t.Helper()
	requireSidecar(t)
	for attempt := 1; ; attempt++ {
		s := &sidecar{listenPort: freePort(t)}
		s.listen = fmt.Sprintf("127.0.0.1:%d", s.listenPort)
		s.metrics = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		s.admin = fmt.Sprintf("127.0.0.1:%d", freePort(t))
		s.proc = startProc(t, "sidecar", bins.sidecar, append([]string{"run",
			"--listen", s.listen,
			"--upstream", fmt.Sprintf("127.0.0.1:%d", upstreamPort),
			"--upstream-conns", strconv.Itoa(upstreamConns),
			"--metrics", s.metrics,
			"--admin", s.admin,
			"--log-format", "console"}, extra...)...)
		if s.waitReady(t, attempt < 3) {
			s.waitMetric(t, 10*time.Second, "stormgate_upstream_connections", func(v float64) bool { return v == upstreamConns })
			return s
		}
		t.Logf("sidecar: a port was taken before it could bind it (%s); starting it again on other ports", lastLine(s.stderrText()))
	}
}

// waitReady waits up to 20 s for /readyz to answer 200. It returns false when the sidecar exited because an
// address was in use and retry allows that; any other failure ends the test.
func (s *sidecar) waitReady(t *testing.T, retry bool) bool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-s.Done():
			if retry && strings.Contains(s.stderrText(), "address already in use") {
				return false
			}
			t.Fatalf("sidecar exited (%v) before it was ready", s.Err())
		default:
		}
		if resp, err := http.Get("http://" + s.metrics + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return true
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("sidecar /readyz not 200 within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// scrape reads /metrics and returns every sample keyed by its series (name plus labels, as printed).
func (s *sidecar) scrape(t *testing.T) metrics {
	t.Helper()
	m, err := scrapeMetrics("http://" + s.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitMetric polls the sum of metric name until ok accepts it, and returns when that happened.
func (s *sidecar) waitMetric(t *testing.T, timeout time.Duration, name string, ok func(float64) bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		m, err := scrapeMetrics("http://" + s.metrics + "/metrics")
		if err == nil && ok(m.sum(name)) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v (scrape error %v) after %v", name, m.sum(name), err, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type metrics map[string]float64

// sum adds every series of the metric name (all label sets); for a histogram name use name_count.
func (m metrics) sum(name string) float64 {
	var v float64
	for series, x := range m {
		if series == name || strings.HasPrefix(series, name+"{") {
			v += x
		}
	}
	return v
}

// filter returns the series of name as "labels=value" strings, for logs.
func (m metrics) filter(name string) string {
	var parts []string
	for series, x := range m {
		if series == name || strings.HasPrefix(series, name+"{") {
			parts = append(parts, fmt.Sprintf("%s=%g", strings.TrimPrefix(series, name), x))
		}
	}
	return strings.Join(parts, " ")
}

func scrapeMetrics(url string) (metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	m := metrics{}
	for _, line := range bytes.Split(body, []byte("\n")) {
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		i := bytes.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(line[i+1:]), 64)
		if err != nil {
			continue
		}
		m[string(line[:i])] = v
	}
	return m, nil
}

// onceSummary and loopSummary mirror dgconsumer's JSON output.
type onceSummary struct {
	OK        bool   `json:"ok"`
	Conns     int    `json:"conns"`
	ConnsWait string `json:"conns_wait"`
	Checks    []struct {
		Name    string `json:"name"`
		OK      bool   `json:"ok"`
		Detail  string `json:"detail"`
		Elapsed string `json:"elapsed"`
	} `json:"checks"`
	Elapsed string `json:"elapsed"`
}

type loopSummary struct {
	Sent       int         `json:"sent"`
	OK         int         `json:"ok"`
	Errors     int         `json:"errors"`
	Timeouts   int         `json:"timeouts"`
	Mismatches int         `json:"mismatches"`
	MaxLatency string      `json:"max_latency"`
	P50        string      `json:"p50"`
	P99        string      `json:"p99"`
	Elapsed    string      `json:"elapsed"`
	Failures   []callError `json:"failures"`
	FailedArgs []string    `json:"failed_args"`
	FailedErrs []string    `json:"failed_errs"`
	Mismatched []mismatch  `json:"mismatched"`
}

// mismatch is one call of a loop summary answered with another value (dgconsumer's Mismatch).
type mismatch struct {
	AtNano int64  `json:"at_ns"` // when the call began, Unix nanoseconds
	Arg    string `json:"arg"`
	Got    string `json:"got"` // "" for a null answer
}

// callError is one failed call of a loop summary (dgconsumer's CallError).
type callError struct {
	At     string `json:"at"`    // since the consumer's start
	AtNano int64  `json:"at_ns"` // when the call began, Unix nanoseconds
	Err    string `json:"err"`
}

func isJSON(l string) bool { return strings.HasPrefix(l, "{") }

// readSummary waits for the consumer's JSON line and decodes it into v.
func readSummary(t *testing.T, c *proc, timeout time.Duration, v any) string {
	t.Helper()
	l, err := c.waitLine(timeout, isJSON)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(l), v); err != nil {
		t.Fatalf("consumer summary %q: %v", l, err)
	}
	return l
}

// tick is one "TICK n start latency ok|err" line of `dgconsumer loop --ticks`.
type tick struct {
	n          int
	start, end time.Time
	ok         bool
}

func parseTick(l string) (tick, bool) {
	f := strings.Fields(l)
	if len(f) != 5 || f[0] != "TICK" {
		return tick{}, false
	}
	n, err1 := strconv.Atoi(f[1])
	start, err2 := strconv.ParseInt(f[2], 10, 64)
	lat, err3 := strconv.ParseInt(f[3], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return tick{}, false
	}
	s := time.Unix(0, start)
	return tick{n: n, start: s, end: s.Add(time.Duration(lat)), ok: f[4] == "ok"}, true
}
