package interop

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 22, acceptance 1: the real dubbo-go consumer calls Echo every 10 ms on each of 4 workers with a per-call
// timeout (dubbo-go sends it in the request's `timeout` attachment); the real provider is SIGKILLed and started
// again 1.5 s later. Before issue 22, a call that timed out at the consumer during the outage was held and run by
// the restarted provider anyway: the consumer had given up (and a Java consumer would have retried it elsewhere),
// so the call ran twice. Now:
//   - with a 500 ms timeout, no call that failed at the consumer ran at the restarted provider: Stormgate answers
//     a held call itself when its consumer's deadline (less hold.deadline_margin) comes, and never sends it;
//   - with a 5 s timeout, the outage fits in the consumers' wait: no call fails, except one the killed provider
//     had already read (it may have run; it is answered as lost and never sent again).
//
// Each provider process logs the calls it runs to a file of its own, so a failed call can be placed.
func testDeadlinesAcrossKill(t *testing.T) {
	for _, c := range []struct {
		name    string
		timeout time.Duration
		// mayFail: failed calls are allowed (as long as none ran at the restarted provider).
		mayFail bool
	}{{"timeout_500ms", 500 * time.Millisecond, true}, {"timeout_5s", 5 * time.Second, false}} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			before, after := filepath.Join(dir, "killed.log"), filepath.Join(dir, "restarted.log")
			prov := lifecycleProvider(t, 0, before)
			sc := startSidecar(t, prov.port)
			base := sc.scrape(t)
			const duration = 9 * time.Second
			cons := startProc(t, "dgconsumer", bins.consumer, "--addr", sc.listen, "--timeout", c.timeout.String(),
				"loop", "--duration", duration.String(), "--interval", "10ms", "--workers", "4", "--hold")
			watch := watchConns(sc.listenPort)
			time.Sleep(2 * time.Second)
			killAt := time.Now()
			prov.Kill()
			time.Sleep(1500 * time.Millisecond)
			lifecycleProvider(t, prov.port, after)
			t.Logf("provider killed, restarted 1.5 s later; up again %v after the kill", time.Since(killAt).Round(time.Millisecond))

			var s loopSummary
			line := readSummary(t, cons, duration+30*time.Second, &s)
			watch.finish(t)
			checkNoneClosed(t, sc, base)
			closeStdinAndWait(t, cons)
			m := sc.scrape(t)
			t.Logf("consumer: %s", line)
			logLifecycleMetrics(t, m)

			ranBefore, ranAfter := callLog(t, before), callLog(t, after)
			for arg := range ranBefore {
				if ranAfter[arg] > 0 {
					t.Errorf("call %q ran at the killed provider and again at the restarted one", arg)
				}
			}
			var lateRuns, readByKilled []string
			for i, arg := range s.FailedArgs {
				switch {
				case ranAfter[arg] > 0:
					lateRuns = append(lateRuns, arg)
				case ranBefore[arg] > 0 || i < len(s.FailedErrs) && strings.Contains(s.FailedErrs[i], "the provider had received it before it closed"):
					readByKilled = append(readByKilled, arg)
				case !c.mayFail:
					t.Errorf("call %q failed although the outage fits in its 5 s timeout and the killed provider never read it: %s",
						arg, s.FailedErrs[i])
				}
			}
			if len(lateRuns) > 0 {
				t.Errorf("%d calls that failed at the consumer ran at the restarted provider (after their consumer gave up): %v",
					len(lateRuns), lateRuns)
			}
			if s.Mismatches != 0 || s.OK+len(s.FailedArgs) != s.Sent {
				t.Errorf("consumer: mismatches %d, ok %d + failed %d of %d sent", s.Mismatches, s.OK, len(s.FailedArgs), s.Sent)
			}
			deadline := m[`stormgate_local_replies_total{reason="deadline"}`] - base[`stormgate_local_replies_total{reason="deadline"}`]
			t.Logf("%d calls, %d failed (%d timeouts), %d answered by Stormgate at their deadline and never sent, %d read by "+
				"the killed provider, %d ran after their consumer gave up; the restarted provider ran %d calls",
				s.Sent, len(s.FailedArgs), s.Timeouts, int(deadline), len(readByKilled), len(lateRuns), len(ranAfter))
			if c.mayFail && deadline == 0 {
				t.Errorf("no call was answered at its deadline: the outage (1.5 s and the restart) is longer than the " +
					"500 ms timeout, so held calls should have been")
			}
			if s.Sent < int(4*duration/(10*time.Millisecond)/3) {
				t.Errorf("only %d calls in %v", s.Sent, duration)
			}
		})
	}
}

// callLog reads a provider's log of the calls it ran ("<method> <arg>" per line) and returns the count per
// argument.
func callLog(t *testing.T, path string) map[string]int {
	t.Helper()
	ran := map[string]int{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return ran
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, arg, ok := strings.Cut(sc.Text(), " "); ok {
			ran[arg]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for arg, n := range ran {
		if n > 1 {
			t.Errorf("%s: call %q ran %d times", filepath.Base(path), arg, n)
		}
	}
	return ran
}
