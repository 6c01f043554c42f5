package main

import (
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runGoroutines are frames of the goroutines `run` starts: the xDS client, the HTTP Serve
// loops, admission's Serve, and anything of run's own.
// and the goroutines serving its HTTP connections.
var runGoroutines = []string{"(*Client).Run", "net/http.(*Server).Serve", "net/http.(*conn).serve", "(*Admitter).Serve",
	"runSidecar", "serveHTTP", "(*plane).serve", "(*upgrader).fromSignal"}

// ownedGoroutines returns the stacks of the goroutines, other than the caller's and those
// in skip (by their "goroutine N" header), that are in one of run's frames.
func ownedGoroutines(skip map[string]bool) []string {
	buf := make([]byte, 1<<20)
	stacks := strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n")
	var out []string
	for _, s := range stacks[1:] { // the first is the caller's
		id, _, _ := strings.Cut(s, " [")
		own, _, _ := strings.Cut(s, "\ncreated by ") // its frames, not its creator's
		for _, f := range runGoroutines {
			if !skip[id] && strings.Contains(own, f) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// freeAddr returns a loopback address that was free a moment ago, on a port below the kernel's
// ephemeral range: a port from 127.0.0.1:0 is an ephemeral one, which any outgoing connection of
// the tests running beside this one (make test runs packages in parallel) may take as its source
// port before run binds it (it did: "bind: address already in use", once in 5 runs of make test).
func freeAddr(t *testing.T) string {
	t.Helper()
	lo, hi := 20000, ephemeralLow()
	for range 100 {
		if hi-lo < 1000 {
			break
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if lo, err := strconv.Atoi(f[0]); err == nil {
			return lo
		}
	}
	return 32768
}

// Every goroutine run starts is joined before run returns: the xDS client (here retrying a
// control plane that is not there), the metrics and admin Serve loops and the requests they
// serve (here a CPU profile of 20 s, still running when the drain ends), admission's Serve.
// A goroutine still running when run has returned outlives the sidecar it belonged to (and
// its logger, synced and gone).
func TestRunJoinsItsGoroutines(t *testing.T) {
	before := map[string]bool{} // another test's, if any
	for _, s := range ownedGoroutines(nil) {
		id, _, _ := strings.Cut(s, " [")
		before[id] = true
	}
	metrics, admin := freeAddr(t), freeAddr(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := execute(t, "run", "--listen", "127.0.0.1:0", "--upstream", busyPort(t), "--metrics", metrics, "--admin", admin,
			"--xds", freeAddr(t), "--node-id", "joined.default", "--xds-wait", "0", "--log-level", "error",
			"--set", "drain.min_duration=0s", "--set", "drain.timeout=1s")
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + metrics + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run ended before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("run not serving /healthz within 10s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	profiling := make(chan struct{})
	go func() {
		defer close(profiling)
		if resp, err := http.Get("http://" + admin + "/debug/pprof/profile?seconds=20"); err == nil {
			resp.Body.Close()
		}
	}()
	for !slices.ContainsFunc(ownedGoroutines(before), func(s string) bool { return strings.Contains(s, "pprof.Profile") }) {
		time.Sleep(10 * time.Millisecond) // bounded by the profile's 20 s and the test's timeout
	}
	resp, err := http.Post("http://"+admin+"/drain", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of POST /drain")
	}
	// net/http's connection goroutines end after Shutdown has closed their connections, not
	// before it returns (http.Server cannot join them): wait for them to be gone, a bounded wait
	// for an event that a leak never brings.
	left := ownedGoroutines(before)
	for end := time.Now().Add(5 * time.Second); len(left) > 0 && time.Now().Before(end); left = ownedGoroutines(before) {
		time.Sleep(10 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%d goroutine(s) of run still running 5 s after it returned:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
