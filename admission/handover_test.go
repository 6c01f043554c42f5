package admission

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// serveUntil runs a.Serve(h) and returns a channel with its result.
func serveUntil(a *Admitter, h Handler) <-chan error {
	done := make(chan error, 1)
	go func() { done <- a.Serve(context.Background(), h) }()
	return done
}

// listenFrozen listens with testConfig and freezes at once; the snapshot is closed at the end.
func listenFrozen(t *testing.T) (*Admitter, *Snapshot) {
	t.Helper()
	a, err := Listen(testConfig(), zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := a.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sn.Close)
	return a, sn
}

// TestFreezeRestoreLosesNothing is the handover of issue 14 within one process: an admitter
// holding one admitted and four pending connections (each with a request already sent) is
// frozen; two consumers connect while it is frozen; the snapshot goes through
// MarshalBinary/UnmarshalBinary as across an exec, and a restored admitter admits all six
// waiting connections with their bytes intact, carries the counters over and keeps the
// active count, and the one admitted before keeps working.
func TestFreezeRestoreLosesNothing(t *testing.T) {
	cfg := testConfig()
	cfg.AcceptRate, cfg.AcceptBurst, cfg.MaxWait = 0.001, 1, time.Minute // one token, then nothing
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	reg := prometheus.NewRegistry()
	a, err := Listen(cfg, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t)
	done := serveUntil(a, rec)

	first := dial(t, a, "127.0.0.2")
	admitted := rec.next(2 * time.Second)
	var pending []*net.TCPConn
	for i := range 4 {
		c := dial(t, a, "127.0.0.3")
		if _, err := c.Write([]byte("req-" + string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
		pending = append(pending, c)
	}
	waitFor(t, 2*time.Second, "4 pending", func() bool { return a.Stats().Pending == 4 })

	sn, err := a.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrFrozen) {
			t.Fatalf("Serve returned %v after Freeze, want ErrFrozen", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Freeze")
	}
	if len(sn.Pending) != 4 || sn.Listener < 0 {
		t.Fatalf("snapshot: listener %d, %d pending; want a listener and 4", sn.Listener, len(sn.Pending))
	}
	for _, fd := range sn.FDs() {
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC != 0 {
			t.Errorf("fd %d: flags %#x, %v; want FD_CLOEXEC cleared (it must survive execve)", fd, fl, err)
		}
	}
	// Frozen: the socket still completes handshakes (the kernel queues them), nobody is refused.
	late := []*net.TCPConn{dial(t, a, "127.0.0.4"), dial(t, a, "127.0.0.4")}
	for _, c := range late {
		if _, err := c.Write([]byte("late")); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close after Freeze: %v (want a no-op)", err)
	}
	if _, err := a.Freeze(); err == nil {
		t.Error("a second Freeze succeeded")
	}
	// The consumer admitted before the freeze closes; its owner reports it to the frozen
	// admitter, and the count must follow the snapshot.
	rec.close(admitted.FD)
	a.ConnClosed()
	first.Close()

	b, err := sn.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var crossed Snapshot
	if err := crossed.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	cfg2 := cfg
	cfg2.AcceptRate = 0 // unlimited: the settings of the new image apply
	// The same registry: Freeze gave the series up.
	r, err := Restore(&crossed, cfg2, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Addr().String() != a.Addr().String() {
		t.Fatalf("restored on %v, was %v", r.Addr(), a.Addr())
	}
	rec2 := newRecorder(t)
	done2 := serveUntil(r, rec2)
	t.Cleanup(func() {
		r.Close()
		if err := <-done2; !errors.Is(err, net.ErrClosed) {
			t.Errorf("restored Serve returned %v", err)
		}
	})
	got := map[string]bool{}
	for range 6 {
		c := rec2.next(5 * time.Second)
		conn := fdConn(t, c.FD)
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 5)
		n, err := io.ReadAtLeast(conn, buf, 4)
		if err != nil {
			t.Fatalf("admitted connection from %v: read %v", c.Remote, err)
		}
		got[string(buf[:n])] = true
		if fl, _ := unix.FcntlInt(uintptr(c.FD), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
			t.Errorf("restored connection fd %d without FD_CLOEXEC", c.FD)
		}
	}
	for _, want := range []string{"req-a", "req-b", "req-c", "req-d", "late"} {
		if !got[want] {
			t.Errorf("no restored connection carried %q (got %v)", want, got)
		}
	}
	st := r.Stats()
	if st.Accepted != 7 || st.Admitted != 7 || st.Active != 6 || st.Pending != 0 {
		t.Errorf("restored stats %+v; want accepted 7 (5 before, 2 after), admitted 7, active 6", st)
	}
	if v := counterValue(t, reg, "stormgate_downstream_accepted_total", ""); v != 7 {
		t.Errorf("stormgate_downstream_accepted_total = %v after the handover, want 7 (carried over)", v)
	}
	// Connections still arrive and are served.
	echoOnce(t, dial(t, r, "127.0.0.5"), fdConn(t, rec2.next(2*time.Second).FD), "after")
}

// A pending connection keeps its place in time across the handover: its MaxWait counts from
// its accept, not from the restore.
func TestRestoreKeepsAcceptTimes(t *testing.T) {
	cfg := testConfig()
	cfg.AcceptRate, cfg.AcceptBurst, cfg.MaxWait = 0.001, 1, time.Minute
	a, err := Listen(cfg, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(t)
	done := serveUntil(a, rec)
	dial(t, a, "")
	rec.next(2 * time.Second)
	dial(t, a, "")
	waitFor(t, 2*time.Second, "1 pending", func() bool { return a.Stats().Pending == 1 })
	sn, err := a.Freeze()
	if err != nil {
		t.Fatal(err)
	}
	<-done
	acceptedAt := sn.Pending[0].AcceptedAt
	time.Sleep(50 * time.Millisecond)
	cfg.MaxWait = 20 * time.Millisecond // already overdue: admitted at once, token or not
	r, err := Restore(sn, cfg, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec2 := newRecorder(t)
	done2 := serveUntil(r, rec2)
	defer func() { r.Close(); <-done2 }()
	c := rec2.next(2 * time.Second)
	if d := c.AcceptedAt.Sub(time.Now().Add(-time.Since(acceptedAt))); d > 5*time.Millisecond || d < -5*time.Millisecond {
		t.Errorf("restored AcceptedAt off by %v", d)
	}
}

// Restore refuses what cannot change across a handover, and leaves the snapshot's
// descriptors with the snapshot.
func TestRestoreRefusesFixedFields(t *testing.T) {
	_, sn := listenFrozen(t)
	cfg := testConfig()
	cfg.Address = "127.0.0.1:1"
	if _, err := Restore(sn, cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "Address") {
		t.Errorf("address change: %v", err)
	}
	cfg = testConfig()
	cfg.Transparent = true
	if _, err := Restore(sn, cfg, nil, nil); err == nil || !strings.Contains(err.Error(), "Transparent") {
		t.Errorf("transparent change: %v", err)
	}
	if _, err := unix.FcntlInt(uintptr(sn.Listener), unix.F_GETFD, 0); err != nil {
		t.Errorf("the snapshot's listener was closed by a refused Restore: %v", err)
	}
	var bad Snapshot
	if err := bad.UnmarshalBinary([]byte(`{"format":99,"listener":3}`)); err == nil || !strings.Contains(err.Error(), "format 99") {
		t.Errorf("unknown format: %v", err)
	}
}

// Freeze without Serve works (a handover right after start), and a frozen Admitter refuses
// Update; StopAccepting first makes Freeze fail.
func TestFreezeEdges(t *testing.T) {
	a, _ := listenFrozen(t)
	if err := a.Update(testConfig()); err == nil {
		t.Error("Update after Freeze succeeded")
	}
	if err := a.Serve(context.Background(), newRecorder(t)); !errors.Is(err, ErrFrozen) {
		t.Errorf("Serve after Freeze: %v, want ErrFrozen", err)
	}
	b, err := Listen(testConfig(), zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.StopAccepting()
	if _, err := b.Freeze(); err == nil {
		t.Error("Freeze after StopAccepting succeeded")
	}
}
