package interop

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 27, acceptance 1 (in part): the real dubbo-go v3.3.0 Triple provider restarted under 8 Triple callers
// (calls that stay 20 ms in the provider) through Stormgate (upstream.protocol triple), gracefully (SIGTERM) and
// by SIGKILL, three times each. No consumer connection closes; no call runs twice (the providers log every call
// they run); no call times out or gets another's answer; calls made while the provider is down are held and
// answered. The calls that fail are the ones inside the provider when it went: begun in the second before an
// exit, at most one per caller (8) per exit, each ended by Stormgate's grpc-status 14 ("provider connection
// lost") or by the provider's own reset, or (dubbo-go, rarely) the empty answer of its rejected-execution
// handler in the millisecond before its exit (tripleRejectedNull).
//
// A dubbo-go Triple provider sends no GOAWAY on SIGTERM (its h2c connections are hijacked, so its HTTP server's
// Shutdown skips them), and does not wait for the calls on them: after its 6 s graceful shutdown the process
// exits with calls running, and the connections just end (FIN, or RST with bytes it had not read). Nothing on
// the wire tells Stormgate which of those it had run: the provider's log shows most had, the rest it had read.
// Stormgate sends again what never left it (reheld_unsent) and what the provider answered with its
// not-exported 404 in a connection's first hold.not_executed_window; it cannot make the exit itself lossless.
func TestTripleRestarts(t *testing.T) {
	t.Run("graceful_x3", func(t *testing.T) { testTripleRestarts(t, dubboGoTriple, syscall.SIGTERM) })
	t.Run("sigkill_x3", func(t *testing.T) { testTripleRestarts(t, dubboGoTriple, syscall.SIGKILL) })
	t.Run("grpc_graceful_x3", func(t *testing.T) { testTripleRestarts(t, grpcInterop, syscall.SIGTERM) })
	t.Run("grpc_sigkill_x3", func(t *testing.T) { testTripleRestarts(t, grpcInterop, syscall.SIGKILL) })
}

// h2Peers is a pair of HTTP/2 peers for the restart scenarios: the provider (restarted on the same port, every
// incarnation logging the calls it runs to reqLog) and a loop consumer of workers callers.
type h2Peers struct {
	name     string
	provider func(t *testing.T, port int, reqLog string) *provider
	consumer func(t *testing.T, addr string, duration time.Duration, workers int) *proc
}

// dubboGoTriple: dubbo-go v3.3.0's Triple provider and consumer (calls that stay 20 ms in the provider, 5 ms
// apart per caller).
var dubboGoTriple = h2Peers{"dubbo-go Triple",
	func(t *testing.T, port int, reqLog string) *provider {
		return startProvider(t, port, "--protocol", "triple", "--log-level", "info", "--log-requests", reqLog)
	},
	func(t *testing.T, addr string, duration time.Duration, workers int) *proc {
		return startProc(t, "dgconsumer", bins.consumer, "--addr", addr, "--protocol", "triple",
			"loop", "--duration", duration.String(), "--interval", "5ms", "--workers", strconv.Itoa(workers),
			"--method", "Hold", "--hold-for", "20ms", "--hold")
	}}

// grpcInterop: grpc-go's interop server (GracefulStop on SIGTERM) and unary calls to it (UnaryCall, 5 ms apart
// per caller), each tagged and checked by the tag the server echoes.
var grpcInterop = h2Peers{"grpc-go interop",
	func(t *testing.T, port int, reqLog string) *provider {
		return startServer(t, "grpcinterop-server", bins.grpc, port, []string{"server"}, "--log-requests", reqLog)
	},
	func(t *testing.T, addr string, duration time.Duration, workers int) *proc {
		return startProc(t, "grpcinterop-loop", bins.grpc, "loop", "--addr", addr, "--duration", duration.String(),
			"--interval", "5ms", "--workers", strconv.Itoa(workers), "--hold")
	}}

// tripleRejectedNull is what a dubbo-go Triple consumer says of the empty answer an exiting dubbo-go v3.3.0
// provider gives through its rejected-execution handler, in the millisecond between RejectRequest and
// unexport ("The invocation was rejected" in its log; lifecycle_test.go has the Dubbo form, a null value):
// the provider's own answer, with or without Stormgate, which passes it on (nothing tells it from an answer).
const tripleRejectedNull = "@in is nil"

// rejectedNulls checks that the calls failed with tripleRejectedNull are no more than the rejections the
// providers logged, and that none of them ran.
func rejectedNulls(s loopSummary, rejected int, ran map[string]int) error {
	n := 0
	for i, f := range s.Failures {
		if !strings.Contains(f.Err, tripleRejectedNull) {
			continue
		}
		n++
		if i < len(s.FailedArgs) && ran[s.FailedArgs[i]] > 0 {
			return fmt.Errorf("call %q ran and was answered empty", s.FailedArgs[i])
		}
	}
	if n > rejected {
		return fmt.Errorf("%d calls answered empty, more than the %d rejections the providers logged", n, rejected)
	}
	return nil
}

// exitNoticed bounds how long after a provider's exit (as the test saw it) Stormgate may still write a call to
// the dead connection: until its reader sees the connection's end. Restarts are at least 2 s apart.
const exitNoticed = 500 * time.Millisecond

func testTripleRestarts(t *testing.T, peers h2Peers, sig syscall.Signal) {
	const rounds, workers = 3, 8
	duration := 15 * time.Second
	if sig == syscall.SIGTERM && peers.name == dubboGoTriple.name {
		duration = 32 * time.Second // dubbo-go's shutdown takes about 6 s
	}
	reqLog := filepath.Join(t.TempDir(), "requests.log")
	provider := func(port int) *provider { return peers.provider(t, port, reqLog) }
	prov := provider(0)
	sc := startSidecar(t, prov.port, "--upstream-protocol", "triple")
	before := sc.scrape(t)
	c := peers.consumer(t, sc.listen, duration, workers)
	started := time.Now()
	watch := watchConns(sc.listenPort)
	var (
		exits    []time.Time
		rejected int // calls the exiting dubbo-go providers answered through their rejected-execution handler
	)
	for round := 1; round <= rounds; round++ {
		time.Sleep(time.Second + time.Duration(rand.IntN(500))*time.Millisecond)
		sigAt := time.Now()
		if err := prov.Signal(sig); err != nil {
			t.Fatal(err)
		}
		prov.wait(t, 30*time.Second)
		exited := time.Now()
		exits = append(exits, exited)
		rejected += strings.Count(prov.stderrText(), "The invocation was rejected")
		time.Sleep(time.Second)
		prov = provider(prov.port)
		t.Logf("round %d: %v %v into the run, the provider exited %v later, restarted one READY %v after that",
			round, sig, sigAt.Sub(started).Round(time.Millisecond), exited.Sub(sigAt).Round(time.Millisecond),
			time.Since(exited).Round(time.Millisecond))
	}
	if time.Since(started) > duration-time.Second {
		t.Fatal("the restarts outlasted the consumer's calls (a slow machine?)")
	}
	s, _ := endRestartRun(t, c, sc, before, watch, duration)
	ran := ranTwice(t, reqLog)
	var failedRan, failedNotRun []string
	for _, arg := range s.FailedArgs {
		if ran[arg] > 0 {
			failedRan = append(failedRan, arg)
		} else {
			failedNotRun = append(failedNotRun, arg)
		}
	}
	if s.Timeouts != 0 || s.Mismatches != 0 || s.OK+len(s.FailedArgs) != s.Sent {
		t.Errorf("consumer: timeouts=%d mismatches=%d, ok %d + failed %d of %d sent: %+v",
			s.Timeouts, s.Mismatches, s.OK, len(s.FailedArgs), s.Sent, s.Failures)
	}
	// Per exit: the calls inside the provider, and those Stormgate wrote to the connection after the provider
	// was gone and before it read the connection's end that the kernel's proof did not cover.
	if err := failedAtExits(s, exits, 2*workers, exitNoticed, func(err string) bool {
		return strings.Contains(err, "stormgate: provider connection lost") ||
			strings.Contains(err, "received from peer") || // the provider's own RST_STREAM, passed through
			strings.Contains(err, "terminated by RST_STREAM") || // the same, as grpc-go says it
			strings.Contains(err, tripleRejectedNull)
	}); err != nil {
		t.Errorf("%s: %+v", err, s.Failures)
	}
	if err := rejectedNulls(s, rejected, ran); err != nil {
		t.Error(err)
	}
	t.Logf("%s, %v x%d: %d calls, %d run by the providers, %d failed: %d the provider had run, %d it had not run %v",
		peers.name, sig, rounds, s.Sent, len(ran), len(s.FailedArgs), len(failedRan), len(failedNotRun), failedNotRun)
}

// TestRejectedNulls: the allowance for dubbo-go Triple's empty answer at an exit takes only calls that did not
// run, no more than the rejections the providers logged.
func TestRejectedNulls(t *testing.T) {
	empty := loopSummary{Errors: 2, Failures: []callError{{Err: "invalid_argument: unmarshal into *string: @in is nil"},
		{Err: "unavailable: stormgate: provider connection lost (EOF)"}}, FailedArgs: []string{"w1-5", "w2-5"}}
	for _, c := range []struct {
		name     string
		rejected int
		ran      map[string]int
		ok       bool
	}{
		{"one logged", 1, nil, true},
		{"none logged", 0, nil, false},
		{"the empty one ran", 1, map[string]int{"w1-5": 1}, false},
		{"the other one ran", 1, map[string]int{"w2-5": 1}, true},
	} {
		if err := rejectedNulls(empty, c.rejected, c.ran); (err == nil) != c.ok {
			t.Errorf("%s: rejectedNulls = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}
