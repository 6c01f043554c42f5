package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
)

// The worker test re-executes this test binary as `stormbench worker`: with this variable set,
// TestMain runs the command instead of the tests.
const runAsMainEnv = "STORMBENCH_TEST_RUN_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func startProvider(t *testing.T) *peer.Provider {
	t.Helper()
	p, err := peer.NewProvider(peer.ProviderConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		p.Close()
		<-done
	})
	return p
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := newRootCmd()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("stormbench %v: %v\nstderr:\n%s", args, err, errb.String())
	}
	return out.String(), errb.String()
}

// Two worker processes, each with half the connections and half the rate; the parent merges their
// results exactly.
func TestWorkersMerge(t *testing.T) {
	p := startProvider(t)
	t.Setenv(runAsMainEnv, "1")
	stdout, stderr := runCLI(t, "load", "--target", p.Addr(), "--conns", "21", "--rate", "400",
		"--heartbeat", "100ms", "--duration", "1500ms", "--workers", "2", "--json", "-")
	r, err := loadgen.ParseResult([]byte(stdout))
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if r.Workers != 2 || r.Conns != 21 || r.Rate != 400 || r.ConnsOpened != 21 {
		t.Fatalf("workers %d conns %d rate %v opened %d", r.Workers, r.Conns, r.Rate, r.ConnsOpened)
	}
	// 400/s for 1.5 s, split 11/21 and 10/21 of the rate: 315 + 286 requests.
	if r.Sent != 601 || r.OK != r.Sent || r.Timeouts+r.Lost+r.Errors != 0 {
		t.Fatalf("sent %d ok %d timeouts %d lost %d errors %d", r.Sent, r.OK, r.Timeouts, r.Lost, r.Errors)
	}
	if r.LatencyHist.Count() != r.OK || r.Latency.Count != r.OK || r.Latency.P99 <= 0 {
		t.Fatalf("merged latency %+v, histogram count %d", r.Latency, r.LatencyHist.Count())
	}
	if r.HeartbeatsSent < 21*12 || r.HeartbeatsAnswered != r.HeartbeatsSent {
		t.Fatalf("heartbeats %d/%d", r.HeartbeatsAnswered, r.HeartbeatsSent)
	}
	if r.CPU.RunUser+r.CPU.RunSys <= 0 || r.CPU.PerRequest <= 0 {
		t.Fatalf("cpu %+v", r.CPU)
	}
	st := p.Stats()
	if st.Requests != r.Sent || st.ConnsAccepted != 21 {
		t.Fatalf("provider saw %d requests on %d connections", st.Requests, st.ConnsAccepted)
	}
	// Progress lines were aggregated over both workers, and the summary names both processes.
	if !strings.Contains(stderr, "conns 21 ") || !strings.Contains(stderr, "(2 process(es))") {
		t.Fatalf("stderr:\n%s", stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(stdout), &raw); err != nil || raw["latency_hist"] == nil {
		t.Fatalf("JSON lacks the merged histogram: %v", err)
	}
}

func TestSingleProcessJSONFile(t *testing.T) {
	p := startProvider(t)
	path := t.TempDir() + "/out.json"
	_, stderr := runCLI(t, "load", "--target", p.Addr(), "--conns", "5", "--rate", "100",
		"--duration", "500ms", "--arg-size", "300", "--json", path, "--quiet")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadgen.ParseResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if r.Workers != 1 || r.OK != 50 || len(r.Arg) != 300 || strings.Contains(stderr, "[   ") {
		t.Fatalf("workers %d ok %d arg %d bytes; stderr:\n%s", r.Workers, r.OK, len(r.Arg), stderr)
	}
}

func TestSplitConfig(t *testing.T) {
	cfg := loadgen.Config{Conns: 40_001, Rate: 5000, ConnectRate: 3000, Requests: 1001,
		SourceAddrs: loopbackSources(3)}
	parts := splitConfig(cfg, 3)
	var conns int
	var rate, crate float64
	var reqs uint64
	for _, p := range parts {
		conns += p.Conns
		rate += p.Rate
		crate += p.ConnectRate
		reqs += p.Requests
	}
	if conns != 40_001 || reqs != 1001 || rate < 4999.999 || rate > 5000.001 || crate < 2999.999 || crate > 3000.001 {
		t.Fatalf("split sums: conns %d rate %v connect rate %v requests %d", conns, rate, crate, reqs)
	}
	if parts[1].SourceAddrs[0] != cfg.SourceAddrs[1] || len(parts[1].SourceAddrs) != 3 {
		t.Fatalf("worker 1 sources %v", parts[1].SourceAddrs)
	}
	cfg.KeyBase, cfg.Seed = 7, 100
	parts = splitConfig(cfg, 3)
	if parts[0].KeyBase != 7 || parts[2].KeyBase != 7+2*workerKeySpan || parts[1].Seed != 101 {
		t.Fatalf("worker key bases %d %d %d, seeds %d %d %d", parts[0].KeyBase, parts[1].KeyBase, parts[2].KeyBase,
			parts[0].Seed, parts[1].Seed, parts[2].Seed)
	}
}

// Checked bodies over two worker processes against the echo provider: every answer is compared
// byte for byte, and the workers' keys never collide (the provider would record a body
// delivered twice).
func TestWorkersCheckedBodies(t *testing.T) {
	p, err := peer.StartEcho(peer.EchoConfig{RecvBuf: 4096, MaxSegment: 1460}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Setenv(runAsMainEnv, "1")
	stdout, stderr := runCLI(t, "load", "--target", p.Addr(), "--conns", "10", "--rate", "400",
		"--duration", "1s", "--workers", "2", "--body-max", "200000", "--one-way", "0.2", "--json", "-", "--quiet")
	r, err := loadgen.ParseResult([]byte(stdout))
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if r.Workers != 2 || r.Sent == 0 || r.OneWaySent == 0 || r.OK != r.Sent || r.BodyMismatches != 0 {
		t.Fatalf("workers %d sent %d one-way %d ok %d mismatches %d", r.Workers, r.Sent, r.OneWaySent, r.OK, r.BodyMismatches)
	}
	if !strings.Contains(stderr, "every answer carried exactly its request's body") {
		t.Fatalf("summary lacks the body verdict:\n%s", stderr)
	}
	st := p.Stats()
	if st.Violations != 0 || st.Requests != r.Sent || st.UniqueKeys == 0 {
		t.Fatalf("provider %+v, violations %v", st, p.Violations())
	}
}

// TestWorkersTriple: worker processes carry --protocol triple (they are exec'd with the parent's
// settings): both speak h2c to the Triple echo provider, which checks every call and sees each key once.
func TestWorkersTriple(t *testing.T) {
	p, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	t.Setenv(runAsMainEnv, "1")
	stdout, _ := runCLI(t, "load", "--target", p.Addr(), "--protocol", "triple", "--conns", "10", "--rate", "400",
		"--duration", "1s", "--workers", "2", "--body-max", "200000", "--json", "-", "--quiet")
	r, err := loadgen.ParseResult([]byte(stdout))
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if r.Workers != 2 || r.Sent == 0 || r.OK != r.Sent || r.BodyMismatches != 0 {
		t.Fatalf("workers %d sent %d ok %d mismatches %d", r.Workers, r.Sent, r.OK, r.BodyMismatches)
	}
	st := p.Stats()
	if st.Violations != 0 || st.Requests != r.Sent || st.ConnsAccepted != 10 || st.UniqueKeys == 0 {
		t.Fatalf("provider %+v, violations %v", st, p.Violations())
	}
}

func TestParseAddrList(t *testing.T) {
	got, err := parseAddrList("127.0.0.2-127.0.0.4, 127.0.1.1")
	if err != nil || len(got) != 4 || got[2].String() != "127.0.0.4" || got[3].String() != "127.0.1.1" {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"127.0.0.5-127.0.0.4", "nope", "127.0.0.1-::1", "10.0.0.0-10.1.0.0"} {
		if _, err := parseAddrList(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"load"}, // --target required
		{"load", "--target", "127.0.0.1:1", "--duration", "31m"},
		{"load", "--target", "127.0.0.1:1", "--conns", "40000", "--workers", "2"},
		{"load", "--target", "127.0.0.1:1", "--one-way", "0.5"}, // one-way needs checked bodies
		{"load", "--target", "127.0.0.1:1", "--body-max", "9000000"},
		{"echo-provider", "--slow-chance", "0.8", "--stall-chance", "0.5"},
		{"echo-provider", "--spell", "0s"},
		{"echo-provider", "--restart-every", "-1s"},
		{"load", "--target", "127.0.0.1:1", "--protocol", "http3"},
		{"load", "--target", "127.0.0.1:1", "--protocol", "triple", "--body-max", "100", "--one-way", "0.5"}, // gRPC has no one-way call
		{"echo-provider", "--protocol", "http3"},
	} {
		cmd := newRootCmd()
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(args)
		if err := cmd.Execute(); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// stormbench echo-provider: it prints its address, is killed and restarted on schedule while a
// checked-body load runs against it (reconnecting), and ends with a final line whose violation
// count is zero.
func TestEchoProviderCommand(t *testing.T) {
	// 3 s of load spans about seven kills: enough for a redial to succeed after one even when a
	// loaded machine starves this test (one run beside a CPU hog saw none in 1 s).
	seen, final := loadRestartingEcho(t, []loadgen.Config{{Conns: 4, Rate: 300, Duration: 3 * time.Second,
		Timeout: 2 * time.Second, Reconnect: 20 * time.Millisecond, BodyMax: 50000, OneWay: 0.1}},
		"--seed", "9", "--spell", "50ms", "--slow-chance", "0.5", "--stall-chance", "0.1")
	if seen["killed"] == 0 || seen["restarted"] == 0 || final.Event != "final" || final.Stats == nil ||
		final.Stats.Violations != 0 || final.Stats.Kills == 0 || final.Stats.Requests == 0 {
		t.Fatalf("events %v, final %+v", seen, final.Stats)
	}
}

// stormbench echo-provider --protocol triple is killed and restarted on schedule like the Dubbo one,
// while a Triple load with checked bodies runs against it (reconnecting): the kills and restarts are
// announced, every answer that came was the call's own, and no body was delivered twice.
func TestTripleEchoProviderRestarts(t *testing.T) {
	seen, final := loadRestartingEcho(t, []loadgen.Config{{Protocol: loadgen.ProtocolTriple, Conns: 4, Rate: 300,
		Duration: 3 * time.Second, Timeout: 2 * time.Second, Reconnect: 20 * time.Millisecond, BodyMin: 16, BodyMax: 50000}},
		"--protocol", "triple", "--kill", "alternate")
	if seen["killed"] == 0 || seen["restarted"] == 0 || final.Event != "final" || final.Triple == nil ||
		final.Triple.Violations != 0 || final.Triple.Restarts == 0 || final.Triple.Requests == 0 {
		t.Fatalf("events %v, final %+v, violations %v", seen, final.Triple, final.Violations)
	}
}

// loadRestartingEcho runs `stormbench echo-provider args...`, killed every 400 ms and back 50 ms later,
// under the checked-body loads cfgs (their Target filled in; they run at once), each of which must get
// answers, all its own, and reconnect; it returns how many lines of each event the provider printed
// and its last line.
func loadRestartingEcho(t *testing.T, cfgs []loadgen.Config, args ...string) (map[string]int, echoEvent) {
	t.Helper()
	events, cancel, done := startEchoCommand(t, append([]string{"--listen", "127.0.0.1:0",
		"--restart-every", "400ms", "--down", "50ms", "--stats-every", "0"}, args...)...)
	defer cancel()
	first := <-events
	if first.Event != "listening" || first.Addr == "" {
		t.Fatalf("first line %+v", first)
	}
	ctx, cancelLoad := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelLoad()
	results := make([]*loadgen.Result, len(cfgs))
	errs := make([]error, len(cfgs))
	var loads sync.WaitGroup
	for i, cfg := range cfgs {
		cfg.Target = first.Addr
		loads.Go(func() { results[i], errs[i] = loadgen.Run(ctx, cfg, nil) })
	}
	loads.Wait()
	for i, res := range results {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if res.OK == 0 || res.BodyMismatches != 0 || res.Reconnects == 0 {
			t.Fatalf("%s load: ok %d mismatches %d reconnects %d", res.Protocol, res.OK, res.BodyMismatches, res.Reconnects)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("echo-provider: %v", err)
	}
	seen := map[string]int{}
	var final echoEvent
	for e := range events {
		seen[e.Event]++
		final = e
	}
	return seen, final
}

// stormbench echo-provider --protocol both, killed and restarted on schedule, under a Dubbo and a
// Triple load on its one port at once: each half served only its own protocol's connections (the
// listener handed each over, none foreign), both were killed and restarted, every answer was the
// call's own, and neither half recorded a violation.
func TestBothEchoProviderRestarts(t *testing.T) {
	base := loadgen.Config{Conns: 4, Rate: 200, Duration: 3 * time.Second, Timeout: 2 * time.Second,
		Reconnect: 20 * time.Millisecond, BodyMin: 16, BodyMax: 50000}
	triple := base
	triple.Protocol = loadgen.ProtocolTriple
	seen, final := loadRestartingEcho(t, []loadgen.Config{base, triple}, "--protocol", "both", "--kill", "alternate",
		"--slow-chance", "0.3", "--stall-chance", "0", "--spell", "50ms")
	if seen["killed"] == 0 || seen["restarted"] == 0 || final.Event != "final" || final.Stats == nil || final.Triple == nil || final.Sniff == nil {
		t.Fatalf("events %v, final %+v", seen, final)
	}
	d, tr, sn := final.Stats, final.Triple, final.Sniff
	if d.Violations+tr.Violations+sn.Foreign != 0 || len(final.Violations) != 0 {
		t.Fatalf("violations %v", final.Violations)
	}
	if d.Kills == 0 || d.Restarts == 0 || tr.Restarts != d.Restarts || d.Requests == 0 || tr.Requests == 0 {
		t.Fatalf("Dubbo half %+v, Triple half %+v: want both killed and restarted alike, both answering", d, tr)
	}
	if sn.Dubbo != d.ConnsAccepted || sn.Triple != tr.ConnsAccepted || sn.Dubbo < 8 || sn.Triple < 8 {
		t.Fatalf("listener %+v; halves accepted %d Dubbo and %d Triple connections; want each half's own, and redials",
			sn, d.ConnsAccepted, tr.ConnsAccepted)
	}
}

// stormbench echo-provider --protocol both: a connection whose first bytes are neither protocol's
// is a violation: the final line counts it (sniff.foreign, listed with protocol "") and the exit
// status is 3.
func TestBothEchoProviderForeign(t *testing.T) {
	events, cancel, done := startEchoCommand(t, "--protocol", "both", "--listen", "127.0.0.1:0", "--stats-every", "0")
	defer cancel()
	first := <-events
	c, err := net.Dial("tcp", first.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.ReadAll(c) // closed by the provider
	cancel()
	var ee *exitError
	if err := <-done; !errors.As(err, &ee) || ee.code != 3 {
		t.Fatalf("echo-provider returned %v, want exit status 3", err)
	}
	var final echoEvent
	for e := range events {
		final = e
	}
	if final.Sniff == nil || final.Sniff.Foreign != 1 || len(final.Violations) != 1 || final.Violations[0].Kind != "unknown protocol" {
		t.Fatalf("final %+v, violations %v", final.Sniff, final.Violations)
	}
}

// TestProviderInsideFileSurvivesKill: `provider --inside-file` leaves, after a SIGKILL,
// the number of requests the process had read and not answered.
func TestProviderInsideFileSurvivesKill(t *testing.T) {
	file := filepath.Join(t.TempDir(), "inside")
	cmd := exec.Command(os.Args[0], "provider", "--listen", "127.0.0.1:0", "--inside-file", file, "--log-level", "error")
	cmd.Env = append(os.Environ(), runAsMainEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var first struct{ Addr string }
	if err := json.NewDecoder(out).Decode(&first); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := peer.Dial(ctx, first.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Call(ctx, 1, "s", "echo", "answered"); err != nil {
		t.Fatal(err)
	}
	for id := int64(2); id <= 4; id++ {
		go func() { _, _ = c.Call(ctx, id, "s", "sleep", "1m") }()
	}
	read := func() int64 {
		b, err := os.ReadFile(file)
		if err != nil || len(b) != 8 {
			t.Fatalf("inside file: %v (%d bytes)", err, len(b))
		}
		return int64(binary.LittleEndian.Uint64(b))
	}
	deadline := time.Now().Add(10 * time.Second)
	for read() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("inside = %d, want the 3 sleeping requests", read())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if n := read(); n != 3 {
		t.Fatalf("after SIGKILL the file reads %d, want 3", n)
	}
}

// stormbench echo-provider --protocol triple and stormbench load --protocol triple together: the load's
// JSON counts every call ok with grpc-status 0, its summary shows the Triple line, and the provider's
// final line counts the same calls, the load's PINGs, and no violation.
func TestTripleEchoProviderAndLoadCommands(t *testing.T) {
	events, cancel, done := startEchoCommand(t, "--protocol", "triple", "--listen", "127.0.0.1:0", "--max-streams", "4", "--stats-every", "0")
	defer cancel()
	first := <-events
	if first.Event != "listening" || first.Addr == "" {
		t.Fatalf("first line %+v", first)
	}

	var out, summary bytes.Buffer
	load := newRootCmd()
	load.SetOut(&out)
	load.SetErr(&summary)
	load.SetArgs([]string{"load", "--protocol", "triple", "--target", first.Addr, "--conns", "3", "--rate", "200",
		"--duration", "500ms", "--body-min", "16", "--body-max", "20000", "--heartbeat", "20ms", "--quiet", "--json", "-"})
	if err := load.Execute(); err != nil {
		t.Fatalf("load: %v\n%s", err, summary.String())
	}
	res, err := loadgen.ParseResult(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if res.Protocol != loadgen.ProtocolTriple || res.Sent != 100 || res.OK != 100 || res.GRPCStatus[0] != 100 || res.MaxOpenStreams > 4 {
		t.Fatalf("protocol %q sent %d ok %d grpc-status %v most open streams %d", res.Protocol, res.Sent, res.OK, res.GRPCStatus, res.MaxOpenStreams)
	}
	if !strings.Contains(summary.String(), "grpc-status {0:100}") {
		t.Fatalf("summary without the Triple line:\n%s", summary.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("echo-provider: %v", err)
	}
	var final echoEvent
	for e := range events {
		final = e
	}
	if final.Event != "final" || final.Triple == nil || final.Triple.Requests != 100 || final.Triple.Checked != 100 ||
		final.Triple.LoadPings != res.HeartbeatsSent || final.Triple.Violations != 0 {
		t.Fatalf("final %+v (the load sent %d PINGs)", final.Triple, res.HeartbeatsSent)
	}
}

// startEchoCommand runs `stormbench echo-provider args...` in this process until cancel, its stdout
// lines decoded on events (closed after the last); done receives what the command returned.
func startEchoCommand(t *testing.T, args ...string) (events <-chan echoEvent, cancel func(), done <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	cmd := newRootCmd()
	cmd.SetOut(pw)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append([]string{"echo-provider"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- cmd.ExecuteContext(ctx)
		pw.Close()
	}()
	ch := make(chan echoEvent, 64)
	go func() {
		defer close(ch)
		dec := json.NewDecoder(pr)
		for {
			var e echoEvent
			if dec.Decode(&e) != nil {
				return
			}
			ch <- e
		}
	}()
	return ch, cancel, errc
}
