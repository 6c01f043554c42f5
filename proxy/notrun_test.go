package proxy

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// providerAnswer returns a frame of dubbo/testdata/dubbogo_answers.txt (written by
// dubbo-go v3.3.0's own code) with its id set to id.
func providerAnswer(t *testing.T, name string, id int64) []byte {
	t.Helper()
	data, err := os.ReadFile("dubbo/testdata/dubbogo_answers.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if n, hx, ok := strings.Cut(line, "\t"); ok && n == name {
			b, err := hex.DecodeString(hx)
			if err != nil {
				t.Fatal(err)
			}
			dubbo.SetID(b, id)
			return b
		}
	}
	t.Fatalf("no fixture %q", name)
	return nil
}

// javaAnswer is a Java provider's error answer: the message as one hessian2 string.
func javaAnswer(status byte, msg string, id int64) []byte {
	return dubbo.AppendErrorResponse(nil, id, dubbo.SerialHessian2, status, msg)
}

// holdOutcome and notExecuted read the lifecycle's counters.
func (f *fixture) holdOutcome(o HoldOutcome) float64 { return value(f.srv.m.holdOutcome[o]) }

func (f *fixture) notExecuted(reason string, o NotRunOutcome) float64 {
	return value(f.srv.m.life.notRunCounter(reason, o))
}

type callResult struct {
	resp peer.Response
	err  error
}

func callAsync(ctx context.Context, c *peer.Client, id int64, arg string) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		resp, err := c.Call(ctx, id, svc, "echo", arg)
		ch <- callResult{resp, err}
	}()
	return ch
}

// answeringFixture is a fixture on a ManualClock in front of a scripted provider
// whose answer to its n-th request (from 1) is answer(n, id, frame); seen counts them.
func answeringFixture(t *testing.T, answer func(n int32, id int64, frame []byte) []byte, mods ...func(*Config)) (
	f *fixture, clk *keepalive.ManualClock, seen *atomic.Int32) {
	t.Helper()
	clk = keepalive.NewManualClock(time.Unix(1_000_000, 0))
	seen = new(atomic.Int32)
	prov := newScriptedProvider(t, func(c net.Conn, h dubbo.Header, frame []byte) {
		_, _ = c.Write(answer(seen.Add(1), h.ID, frame))
	})
	mods = append([]func(*Config){func(c *Config) { c.Upstream = prov.addr() }}, mods...)
	return newFixtureWith(t, peer.ProviderConfig{}, Options{Clock: clk}, mods...), clk, seen
}

// TestNotExecutedAnswerIsReheld: within the window after the provider connection
// opened, an answer proving the request never ran sends it back to the hold queue;
// sending waits backoff_base, doubling, and the consumer gets the provider's real
// answer once the provider serves. One case per form the providers write.
func TestNotExecutedAnswerIsReheld(t *testing.T) {
	forms := map[string]func(id int64) []byte{
		"dubbogo_no_exporter": func(id int64) []byte { return providerAnswer(t, "live_no_exporter", id) },
		"java_not_exported": func(id int64) []byte {
			return javaAnswer(dubbo.StatusServiceError, "org.apache.dubbo.remoting.RemotingException: Not found exported service: "+
				"20880/org.stormgate.Greeter in [], may be version or group mismatch\n\tat x", id)
		},
		"java_decode_not_found": func(id int64) []byte {
			return javaAnswer(dubbo.StatusBadRequest, "Fail to decode request due to: java.lang.IllegalArgumentException: "+
				"Service not found:org.stormgate.Greeter, echo\n\tat x", id)
		},
		"threadpool_exhausted": func(id int64) []byte {
			return javaAnswer(dubbo.StatusThreadpoolExhausted, "Server side(127.0.0.1,20880) thread pool is exhausted, detail msg:x", id)
		},
	}
	for reason, notRun := range forms {
		t.Run(reason, func(t *testing.T) {
			f, _, seen := answeringFixture(t, func(n int32, id int64, frame []byte) []byte {
				if n <= 2 {
					return notRun(id)
				}
				return dubbo.AppendValueResponse(nil, id, dubbo.SerialHessian2, argOf(t, frame))
			}, func(c *Config) { c.UpstreamConns = 2 })
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := callAsync(ctx, f.dial(ctx), 7, "once")
			for i, pause := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
				// Counted re-holds, not seen and Held alone: a retry is in the provider's hands
				// (seen) while the hold queue still lists it (Held), and moving the clock then
				// would start the next pause from the moved clock.
				waitFor(t, 10*time.Second, "a not-executed answer and the request held", func() bool {
					return f.notExecuted(reason, NotRunReheld) == float64(i+1) && f.srv.Stats().Held == 1
				})
				// The resend is the hold queue's retry timer, which sends on the wheel's
				// goroutine: once step has fired what is due, a resend would have been
				// handed to the writer (sentTotal) and the queue emptied.
				sent := f.srv.poolList()[0].sentTotal()
				f.step(pause - time.Millisecond)
				if n := f.srv.poolList()[0].sentTotal(); n != sent || f.srv.Stats().Held != 1 {
					t.Fatalf("sent again after %v (sent %d, was %d; held %d); the pause is %v",
						pause-time.Millisecond, n, sent, f.srv.Stats().Held, pause)
				}
				f.step(time.Millisecond)
			}
			r := <-res
			if r.err != nil || r.resp.Status != dubbo.StatusOK || r.resp.Value != "once" {
				t.Fatalf("answer %+v %v; want the provider's OK answer", r.resp, r.err)
			}
			if seen.Load() != 3 {
				t.Fatalf("provider saw the request %d times, want 3", seen.Load())
			}
			if n := f.notExecuted(reason, NotRunReheld); n != 2 {
				t.Fatalf("reheld count %v, want 2", n)
			}
			if n := f.holdOutcome(HoldReheldNotRun); n != 2 {
				t.Fatalf("hold outcome reheld_not_executed %v, want 2", n)
			}
		})
	}
}

// TestNotExecutedRetriesUsedUp: after hold.not_executed_retries re-holds the
// provider's answer goes to the consumer as it is.
func TestNotExecutedRetriesUsedUp(t *testing.T) {
	f, clk, seen := answeringFixture(t, func(_ int32, id int64, _ []byte) []byte {
		return providerAnswer(t, "live_no_exporter", id)
	}, func(c *Config) { c.NotExecutedRetries = 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := callAsync(ctx, f.dial(ctx), 7, "x")
	for i, pause := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		// Counted re-holds: see TestNotExecutedAnswerIsReheld.
		waitFor(t, 10*time.Second, "held again", func() bool {
			return f.notExecuted("dubbogo_no_exporter", NotRunReheld) == float64(i+1) && f.srv.Stats().Held == 1
		})
		clk.Add(pause)
	}
	r := <-res
	if r.err != nil || r.resp.Status != dubbo.StatusOK || !bytes.Contains(r.resp.Raw, []byte("don't have this exporter")) {
		t.Fatalf("answer %+v %v; want the provider's own not-executed answer", r.resp, r.err)
	}
	if seen.Load() != 4 {
		t.Fatalf("provider saw the request %d times, want 4 (1 + 3 retries)", seen.Load())
	}
	if n := f.notExecuted("dubbogo_no_exporter", NotRunPassedOn); n != 1 {
		t.Fatalf("passed_on %v, want 1", n)
	}
}

// TestNotExecutedPassedOn: outside the window, with re-holding off, when the hold
// would end before the retry, and for a business error with the same text, the
// provider's answer goes to the consumer at once.
func TestNotExecutedPassedOn(t *testing.T) {
	cases := []struct {
		name    string
		answer  string
		mod     func(*Config)
		advance time.Duration
		outcome NotRunOutcome // nNotRunOutcomes when the answer is not a not-executed one
	}{
		{"outside the window", "live_no_exporter", nil, 11 * time.Second, NotRunOutsideWindow},
		{"window off", "live_no_exporter", func(c *Config) { c.NotExecutedWindow = 0 }, 0, NotRunOutsideWindow},
		{"retries off", "live_no_exporter", func(c *Config) { c.NotExecutedRetries = 0 }, 0, NotRunPassedOn},
		{"hold ends first", "live_no_exporter", func(c *Config) { c.HoldTimeout = 40 * time.Millisecond }, 0, NotRunPassedOn},
		{"business error, same text", "live_error_same_text", nil, 0, nNotRunOutcomes},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mod := func(*Config) {}
			if tc.mod != nil {
				mod = tc.mod
			}
			f, clk, seen := answeringFixture(t, func(_ int32, id int64, _ []byte) []byte {
				return providerAnswer(t, tc.answer, id)
			}, mod)
			clk.Add(tc.advance)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := <-callAsync(ctx, f.dial(ctx), 7, "x")
			if r.err != nil || r.resp.Status != dubbo.StatusOK || r.resp.Exception == "" {
				t.Fatalf("answer %+v %v; want the provider's exception answer", r.resp, r.err)
			}
			if seen.Load() != 1 {
				t.Fatalf("provider saw the request %d times, want 1", seen.Load())
			}
			if n := f.holdOutcome(HoldReheldNotRun); n != 0 {
				t.Fatalf("re-held %v times", n)
			}
			if tc.outcome != nNotRunOutcomes {
				if n := f.notExecuted("dubbogo_no_exporter", tc.outcome); n != 1 {
					t.Fatalf("%s count %v, want 1", notRunOutcomeNames[tc.outcome], n)
				}
			}
		})
	}
}
