package interop

import (
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
// lost") or by the provider's own reset.
//
// A dubbo-go Triple provider sends no GOAWAY on SIGTERM (its h2c connections are hijacked, so its HTTP server's
// Shutdown skips them), and does not wait for the calls on them: after its 6 s graceful shutdown the process
// exits with calls running, and the connections just end (FIN, or RST with bytes it had not read). Nothing on
// the wire tells Stormgate which of those it had run: the provider's log shows most had, the rest it had read.
// Stormgate sends again what never left it (reheld_unsent) and what the provider answered with its
// not-exported 404 in a connection's first hold.not_executed_window; it cannot make the exit itself lossless.
func TestTripleRestarts(t *testing.T) {
	t.Run("graceful_x3", func(t *testing.T) { testTripleRestarts(t, syscall.SIGTERM) })
	t.Run("sigkill_x3", func(t *testing.T) { testTripleRestarts(t, syscall.SIGKILL) })
}

func testTripleRestarts(t *testing.T, sig syscall.Signal) {
	const rounds, workers = 3, 8
	duration := 15 * time.Second
	if sig == syscall.SIGTERM {
		duration = 32 * time.Second // dubbo-go's shutdown takes about 6 s
	}
	reqLog := filepath.Join(t.TempDir(), "requests.log")
	provider := func(port int) *provider {
		return startProvider(t, port, "--protocol", "triple", "--log-level", "info", "--log-requests", reqLog)
	}
	prov := provider(0)
	sc := startSidecar(t, prov.port, "--upstream-protocol", "triple")
	before := sc.scrape(t)
	c := startProc(t, "dgconsumer", bins.consumer, "--addr", sc.listen, "--protocol", "triple",
		"loop", "--duration", duration.String(), "--interval", "5ms", "--workers", strconv.Itoa(workers), "--method", "Hold",
		"--hold-for", "20ms", "--hold")
	started := time.Now()
	watch := watchConns(sc.listenPort)
	var exits []time.Time
	for round := 1; round <= rounds; round++ {
		time.Sleep(time.Second + time.Duration(rand.IntN(500))*time.Millisecond)
		sigAt := time.Now()
		if err := prov.Signal(sig); err != nil {
			t.Fatal(err)
		}
		prov.wait(t, 30*time.Second)
		exited := time.Now()
		exits = append(exits, exited)
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
	if err := failedAtExits(s, exits, workers, func(err string) bool {
		return strings.Contains(err, "unavailable: stormgate: provider connection lost") ||
			strings.Contains(err, "received from peer") // the provider's own RST_STREAM, passed through
	}); err != nil {
		t.Errorf("%s: %+v", err, s.Failures)
	}
	t.Logf("%v x%d: %d calls, %d run by the providers, %d failed: %d the provider had run, %d it had not run %v",
		sig, rounds, s.Sent, len(ran), len(s.FailedArgs), len(failedRan), len(failedNotRun), failedNotRun)
}
