package admission

import (
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// The admission loop's timing, in a synctest bubble (fake clock): exact, and immune to the
// scheduling noise of a loaded machine. Connections are fake (FD -1): the loop never touches
// an fd unless TCPQuickAck is set.

type loopHarness struct {
	a    *Admitter
	mu   sync.Mutex
	got  []Conn
	done chan struct{}
}

func startLoop(t *testing.T, cfg Config) *loopHarness {
	t.Helper()
	s, err := newSettings(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := &Admitter{
		log:    zap.NewNop(),
		lim:    rate.NewLimiter(limitOf(s), s.burst),
		wake:   make(chan struct{}, 1),
		queue:  newPendingQueue(s.maxWait),
		stopCh: make(chan struct{}),
	}
	a.set.Store(s)
	a.m = newMetrics(func() (uint32, uint32) { return 0, 0 })
	h := &loopHarness{a: a, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		a.admitLoop(HandlerFunc(func(c Conn) {
			h.mu.Lock()
			h.got = append(h.got, c)
			h.mu.Unlock()
		}))
	}()
	return h
}

// push queues n connections from src accepted now, as the accept loop's flush does.
func (h *loopHarness) push(n int, src byte) {
	h.a.mu.Lock()
	wasEmpty := h.a.queue.len() == 0
	for i := range n {
		h.a.queue.push(Conn{FD: -1, Remote: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, src}), uint16(i+1)), AcceptedAt: time.Now()})
	}
	h.a.mu.Unlock()
	if wasEmpty {
		h.a.signal()
	}
}

func (h *loopHarness) stop() []Conn {
	h.a.mu.Lock()
	h.a.stopped = true
	h.a.mu.Unlock()
	close(h.a.stopCh)
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got
}

func TestLoopTokenPacingExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{AcceptRate: 100, AcceptBurst: 10, MaxWait: time.Hour}
		h := startLoop(t, cfg)
		t0 := time.Now()
		h.push(110, 1)
		time.Sleep(2 * time.Second)
		got := h.stop()
		if len(got) != 110 {
			t.Fatalf("admitted %d, want 110", len(got))
		}
		for i, c := range got {
			want := time.Duration(0)
			if i >= 10 { // the burst, then one per 10 ms
				want = time.Duration(i-9) * 10 * time.Millisecond
			}
			if d := c.AdmittedAt.Sub(t0) - want; d < 0 || d > 50*time.Microsecond {
				t.Fatalf("#%d admitted at +%v, want +%v", i, c.AdmittedAt.Sub(t0), want)
			}
		}
	})
}

func TestLoopDeadlinePacingSpreadsAStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 1,000 at once, tokens for 2/s: only deadline pacing can keep MaxWait.
		cfg := Config{AcceptRate: 2, AcceptBurst: 1, MaxWait: time.Second}
		h := startLoop(t, cfg)
		t0 := time.Now()
		h.push(1000, 1)
		time.Sleep(3 * time.Second)
		got := h.stop()
		if len(got) != 1000 {
			t.Fatalf("admitted %d, want 1000", len(got))
		}
		perWindow := map[time.Duration]int{} // admissions per 50 ms window
		for _, c := range got {
			if w := c.AdmittedAt.Sub(c.AcceptedAt); w > cfg.MaxWait {
				t.Fatalf("waited %v > MaxWait", w)
			}
			perWindow[c.AdmittedAt.Sub(t0).Truncate(50*time.Millisecond)]++
		}
		// Even: 1,000 over 1 s is 50 per 50 ms; bucket rounding makes it run a little early.
		for w, k := range perWindow {
			if k > 60 {
				t.Errorf("%d admissions in the 50 ms from +%v: a pile-up, not an even spread", k, w)
			}
		}
		if last := got[len(got)-1].AdmittedAt.Sub(t0); last < 900*time.Millisecond {
			t.Errorf("all admitted by +%v: faster than MaxWait needs", last)
		}
	})
}

func TestLoopDeadlinePacingUsesTokensFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 100 tokens in the bucket cover 100 of 300; the other 200 are spread over MaxWait.
		cfg := Config{AcceptRate: 10, AcceptBurst: 100, MaxWait: time.Second}
		h := startLoop(t, cfg)
		t0 := time.Now()
		h.push(300, 1)
		time.Sleep(3 * time.Second)
		got := h.stop()
		if len(got) != 300 {
			t.Fatalf("admitted %d", len(got))
		}
		if at := got[99].AdmittedAt.Sub(t0); at != 0 {
			t.Errorf("the 100th (last token) admitted at +%v, want at once", at)
		}
		for _, c := range got {
			if w := c.AdmittedAt.Sub(c.AcceptedAt); w > cfg.MaxWait {
				t.Fatalf("waited %v > MaxWait", w)
			}
		}
	})
}

func TestLoopRateUpdateWakesLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{AcceptRate: 0.001, AcceptBurst: 1, MaxWait: time.Hour}
		h := startLoop(t, cfg)
		h.push(5, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		h.mu.Lock()
		n := len(h.got)
		h.mu.Unlock()
		if n != 1 {
			t.Fatalf("admitted %d before the update, want 1 (the burst)", n)
		}
		// What Update does after swapping settings: retune the limiter, wake the loop.
		cfg.AcceptRate = 1000
		s, _ := newSettings(cfg)
		h.a.set.Store(s)
		h.a.lim.SetLimitAt(time.Now(), limitOf(s))
		h.a.signal()
		t1 := time.Now()
		time.Sleep(10 * time.Millisecond)
		got := h.stop()
		if len(got) != 5 {
			t.Fatalf("admitted %d after the update, want 5", len(got))
		}
		if at := got[4].AdmittedAt.Sub(t1); at > 5*time.Millisecond {
			t.Errorf("last admitted %v after the update, want within 4 ms at 1000/s", at)
		}
	})
}

func TestLoopUnlimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startLoop(t, Config{})
		t0 := time.Now()
		h.push(1000, 1)
		synctest.Wait()
		got := h.stop()
		if len(got) != 1000 || got[999].AdmittedAt != t0 {
			t.Errorf("unlimited: %d admitted, last at +%v", len(got), got[len(got)-1].AdmittedAt.Sub(t0))
		}
	})
}
