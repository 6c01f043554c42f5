package proxy

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/stormgate/stormgate/proxy/dubbo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

// TestRequeueCarriesTheCharge: requests taken off a provider connection's send queue
// for the hold queue (the connection died, was found hung or went READONLY) keep
// their buffer-budget charge and their consumer's waiting bytes through the handoff.
// Released in between (fail waits up to ~200 ms for the kernel's proofs there), the
// room went to other consumers and the re-hold's forced charge put Stormgate over
// limits.max_buffered_bytes (TestStalledProviderAnswersEveryRequest peaked 133 KiB
// over a 1 MiB budget); the consumer's waiting bytes dropped to zero and back, which
// resumed a paused consumer for nothing.
func TestRequeueCarriesTheCharge(t *testing.T) {
	srv := startWithoutProvider(t, nil)
	p := srv.pools[0]
	s := &session{srv: srv, pool: p}
	uc := &upConn{pool: p}
	now := srv.now()
	const n, size = 4, 10 << 10
	base := srv.budget.InUse()
	uc.mu.Lock()
	for i := range n {
		if !srv.budget.TryReserve(size) {
			t.Fatal("no budget for the test's requests")
		}
		s.addWaiting(size)
		uc.sendq.push(queued{request: request{sess: s, arrived: now, sendBy: NoDeadline}, frame: bytes.Repeat([]byte{byte('a' + i)}, size)})
	}
	back := uc.takeQueuedLocked()
	uc.mu.Unlock()
	charged := base + n*size
	if got := srv.budget.InUse(); got != charged {
		t.Errorf("after taking the queue: budget in use %d, want %d (the charge goes with the requests)", got, charged)
	}
	if got := s.wait.waiting.Load(); got != n*size {
		t.Errorf("after taking the queue: consumer waiting %d bytes, want %d", got, n*size)
	}
	p.hold.rehold(back, HoldReheld)
	if got := srv.budget.InUse(); got != charged {
		t.Errorf("after the re-hold: budget in use %d, want %d (charged once)", got, charged)
	}
	if got := s.wait.waiting.Load(); got != n*size {
		t.Errorf("after the re-hold: consumer waiting %d bytes, want %d", got, n*size)
	}
	if got := p.hold.Len(); got != n {
		t.Fatalf("held %d, want %d", got, n)
	}
	// Leaving the hold queue gives the charge back exactly once.
	p.hold.mu.Lock()
	for p.hold.Len() > 0 {
		p.hold.popLocked(p.hold.laneOf(size))
	}
	p.hold.mu.Unlock()
	if got := srv.budget.InUse(); got != base {
		t.Errorf("after the hold queue emptied: budget in use %d, want %d", got, base)
	}
	if got := s.wait.waiting.Load(); got != 0 {
		t.Errorf("after the hold queue emptied: consumer waiting %d bytes, want 0", got)
	}
}

// startWithoutProvider starts a Server whose provider address has nothing listening: its pool has no
// usable connection, so what is held stays held (hold.timeout an hour) until the test takes it. tweak,
// if set, changes the settings first. The test must empty the hold queue of its fake sessions before
// it ends (Close would answer them on writers they do not have).
func startWithoutProvider(t *testing.T, tweak func(*Config)) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	cfg := testConfig(dead)
	cfg.HoldTimeout = time.Hour
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := New(cfg, Options{Codec: dubbo.Codec{}, Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}
