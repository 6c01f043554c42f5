package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// ErrFrozen is what Serve returns after Freeze: the listening socket is still open, and belongs
// to the Snapshot.
var ErrFrozen = errors.New("admission: frozen for a handover")

// Snapshot is a frozen Admitter: its listening socket, the connections it had accepted but not
// yet admitted, and its counters, ready to cross an exec (MarshalBinary) and be served again
// by Restore, in the next program image or (after a failed handover) in this one. Every fd it
// holds has close-on-exec cleared, so an execve keeps them at the same numbers. Whoever holds
// a Snapshot owns its fds: Restore takes them over, Close closes them.
type Snapshot struct {
	// Listener is the listening socket's fd (non-blocking, not in any poller).
	Listener int
	// Address is the configured listener.address (maybe port 0); Bound is the bound address.
	Address string
	Bound   netip.AddrPort
	IPv6    bool // AF_INET6 socket (SO_ORIGINAL_DST needs to know)
	// Backlog is the backlog of the last listen(2) on the socket; Transparent the mode it was in.
	Backlog     int
	Transparent bool
	// Pending are the accepted, not yet admitted connections, in accept order.
	Pending []PendingConn
	// Counters carry the cumulative metrics over, so that the totals do not restart at 0.
	Counters SnapshotCounters
	// FrozenAt is the wall-clock time of the Freeze.
	FrozenAt time.Time

	// from is the frozen Admitter while the snapshot is in the process that froze it: the
	// Handler may still close admitted connections (ConnClosed) until it is frozen too, so the
	// active count is read from it when the snapshot is marshalled or restored.
	from *Admitter
}

// PendingConn is an accepted connection waiting for admission, in a Snapshot. AcceptedAt is
// wall-clock time (the monotonic clock does not cross an exec).
type PendingConn struct {
	FD         int            `json:"fd"`
	Remote     netip.AddrPort `json:"remote"`
	Local      netip.AddrPort `json:"local"`
	OrigDst    netip.AddrPort `json:"orig_dst"`
	AcceptedAt time.Time      `json:"accepted_at"`
}

// SnapshotCounters are the Admitter's cumulative counters and its active count.
type SnapshotCounters struct {
	Accepted     uint64            `json:"accepted"`
	Admitted     uint64            `json:"admitted"`
	Rejected     map[string]uint64 `json:"rejected"`
	AcceptErrors uint64            `json:"accept_errors"`
	Overflows    uint64            `json:"listen_overflows"`
	Drops        uint64            `json:"listen_drops"`
	// Active is admitted connections not yet reported closed: after Restore, the Handler's
	// restored connections report their closes to the new Admitter.
	Active int64 `json:"active"`
}

// snapshotFormat is the version of MarshalBinary's encoding; UnmarshalBinary refuses others,
// so that a binary which cannot read a snapshot says so instead of misreading it.
const snapshotFormat = 1

// Freeze stops accepting and admitting without closing anything: the listening socket stays
// open (new handshakes wait in the kernel's accept queue, nobody is refused) and connections
// waiting for admission stay open, unread. Serve returns ErrFrozen once its goroutines have
// exited, and Freeze waits for that. The returned Snapshot owns the listener (a dup of its fd,
// out of Go's poller) and the pending connections; the Admitter is finished (Close,
// StopAccepting and Update do nothing or fail), except ConnClosed, which keeps counting until
// the Snapshot is marshalled or restored. Freeze fails after StopAccepting, Close or Freeze.
func (a *Admitter) Freeze() (*Snapshot, error) {
	first := false
	a.stopOnce.Do(func() {
		first = true
		a.frozen.Store(true)
		a.stopping.Store(true)
		close(a.stopCh)
		// Wake the accept goroutine parked in the poller, without closing the socket.
		_ = a.file.SetReadDeadline(time.Unix(1, 0))
	})
	if !first {
		return nil, errors.New("admission: Freeze after StopAccepting, Close or Freeze")
	}
	if a.serving.Load() {
		<-a.loopsDone
	}
	a.updateMu.Lock() // no Update in the middle of this
	defer a.updateMu.Unlock()
	s := a.set.Load()
	sn := &Snapshot{Address: s.cfg.Address, Bound: a.addr, IPv6: a.ipv6, Backlog: s.backlog,
		Transparent: s.cfg.Transparent, FrozenAt: time.Now().Round(0), from: a, Listener: -1}

	for _, c := range a.takePending() {
		sn.Pending = append(sn.Pending, PendingConn{FD: c.FD, Remote: c.Remote, Local: c.Local, OrigDst: c.OrigDst,
			AcceptedAt: c.AcceptedAt.Round(0)})
	}
	// dup(2) gives a descriptor without FD_CLOEXEC and outside the runtime poller; closing the
	// os.File then drops the original from the poller. The socket is never closed.
	var dupErr error
	if err := a.raw.Control(func(fd uintptr) { sn.Listener, dupErr = unix.Dup(int(fd)) }); err != nil {
		dupErr = err
	}
	if dupErr != nil {
		sn.Close()
		return nil, fmt.Errorf("admission: dup of the listening socket: %w", dupErr)
	}
	_ = a.file.Close()
	for _, p := range sn.Pending {
		if err := clearCloexec(p.FD); err != nil {
			sn.Close()
			return nil, fmt.Errorf("admission: pending connection fd %d: %w", p.FD, err)
		}
	}
	a.sampleKernelNow()
	sn.Counters = SnapshotCounters{
		Accepted:     a.accepted.Load(),
		Admitted:     a.admitted.Load(),
		Rejected:     make(map[string]uint64, numReasons),
		AcceptErrors: a.acceptErrors.Load(),
		Overflows:    a.overflows.Load(),
		Drops:        a.drops.Load(),
	}
	for r := range numReasons {
		sn.Counters.Rejected[r.String()] = a.rejected[r].Load()
	}
	// The restored Admitter registers the same series (in this process, after a failed
	// handover) and carries the counts over.
	a.m.unregister(a.reg)
	a.log.Info("admission: frozen for a handover", zap.Stringer("address", a.addr),
		zap.Int("pending", len(sn.Pending)), zap.Int64("active", a.active.Load()))
	return sn, nil
}

// FDs lists the descriptors the snapshot owns: the listener first, then the pending connections.
func (sn *Snapshot) FDs() []int {
	out := make([]int, 0, 1+len(sn.Pending))
	if sn.Listener >= 0 {
		out = append(out, sn.Listener)
	}
	for _, p := range sn.Pending {
		out = append(out, p.FD)
	}
	return out
}

// Close closes every descriptor the snapshot owns: the listener (queued handshakes are then
// reset by the kernel) and the pending connections (with a FIN). For a snapshot nobody will
// restore.
func (sn *Snapshot) Close() {
	if sn.Listener >= 0 {
		_ = unix.Close(sn.Listener)
		sn.Listener = -1
	}
	for _, p := range sn.Pending {
		closeWithFIN(p.FD)
	}
	sn.Pending = nil
}

// active is the count to restore: the frozen Admitter's while it exists (see Snapshot.from).
func (sn *Snapshot) active() int64 {
	if sn.from != nil {
		return sn.from.active.Load()
	}
	return sn.Counters.Active
}

type snapshotJSON struct {
	Format      int              `json:"format"`
	Listener    int              `json:"listener"`
	Address     string           `json:"address"`
	Bound       netip.AddrPort   `json:"bound"`
	IPv6        bool             `json:"ipv6"`
	Backlog     int              `json:"backlog"`
	Transparent bool             `json:"transparent"`
	Pending     []PendingConn    `json:"pending"`
	Counters    SnapshotCounters `json:"counters"`
	FrozenAt    time.Time        `json:"frozen_at"`
}

// MarshalBinary encodes the snapshot (JSON, with a format version) for the next image; the
// descriptors themselves cross the exec by number.
func (sn *Snapshot) MarshalBinary() ([]byte, error) {
	c := sn.Counters
	c.Active = sn.active()
	return json.Marshal(snapshotJSON{Format: snapshotFormat, Listener: sn.Listener, Address: sn.Address,
		Bound: sn.Bound, IPv6: sn.IPv6, Backlog: sn.Backlog, Transparent: sn.Transparent,
		Pending: sn.Pending, Counters: c, FrozenAt: sn.FrozenAt})
}

// UnmarshalBinary decodes what MarshalBinary wrote, refusing another format version.
func (sn *Snapshot) UnmarshalBinary(b []byte) error {
	var j snapshotJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("admission: snapshot: %w", err)
	}
	if j.Format != snapshotFormat {
		return fmt.Errorf("admission: snapshot format %d; this binary reads format %d", j.Format, snapshotFormat)
	}
	if j.Listener < 0 {
		return errors.New("admission: snapshot without a listening socket")
	}
	*sn = Snapshot{Listener: j.Listener, Address: j.Address, Bound: j.Bound, IPv6: j.IPv6, Backlog: j.Backlog,
		Transparent: j.Transparent, Pending: j.Pending, Counters: j.Counters, FrozenAt: j.FrozenAt}
	return nil
}

// Restore builds a serving-ready Admitter from a snapshot: the same listening socket (nothing
// was refused while it was frozen: handshakes waited in its accept queue), the pending
// connections back in the queue with their accept times (a connection waits at most MaxWait
// in total, the handover included), the counters and active count carried over. cfg must keep
// what cannot change live (Address, Transparent); the rest applies as by Update (listen(2)
// again when the backlog differs). Metrics are registered on reg as by Listen (Freeze
// unregistered the frozen Admitter's, so the same registry works in the same process). On success the Admitter
// owns the snapshot's descriptors (close-on-exec set again); on error they stay with sn.
// Call Serve next.
func Restore(sn *Snapshot, cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Admitter, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if sn == nil || sn.Listener < 0 {
		return nil, errors.New("admission: Restore of an empty snapshot")
	}
	s, err := newSettings(cfg)
	if err != nil {
		return nil, err
	}
	if s.addr != sn.Bound {
		if was, err := parseAddress(sn.Address); err != nil || was != s.addr {
			return nil, fmt.Errorf("admission: Address cannot change across a handover (listening on %s, asked for %s)", sn.Bound, cfg.Address)
		}
	}
	if s.cfg.Transparent != sn.Transparent {
		return nil, fmt.Errorf("admission: Transparent cannot change across a handover (is %t)", sn.Transparent)
	}
	fd := sn.Listener
	if s.backlog != sn.Backlog {
		if err := unix.Listen(fd, s.backlog); err != nil {
			return nil, fmt.Errorf("admission: listen(backlog %d): %w", s.backlog, err)
		}
	}
	if err := applyListenerOptions(fd, s); err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	for _, f := range sn.FDs() {
		unix.CloseOnExec(f) // ours again: later children (a preflight) must not inherit them
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("admission: listener: %w", err)
	}
	a, err := newAdmitter(fd, sn.Bound, sn.IPv6, s, log)
	if err != nil {
		sn.Listener = -1 // closed by newAdmitter
		return nil, err
	}
	if err := a.m.register(reg); err != nil {
		// Give the socket back to the snapshot: closing the os.File closes its descriptor.
		if nfd, derr := unix.Dup(fd); derr == nil {
			sn.Listener = nfd
		}
		a.file.Close()
		return nil, fmt.Errorf("admission: registering metrics: %w", err)
	}
	a.reg = reg
	c := sn.Counters
	a.accepted.Store(c.Accepted)
	a.admitted.Store(c.Admitted)
	a.acceptErrors.Store(c.AcceptErrors)
	a.overflows.Store(c.Overflows)
	a.drops.Store(c.Drops)
	a.active.Store(sn.active())
	a.m.accepted.Add(float64(c.Accepted))
	a.m.admitted.Add(float64(c.Admitted))
	a.m.overflows.Add(float64(c.Overflows))
	a.m.drops.Add(float64(c.Drops))
	for r := range numReasons {
		n := c.Rejected[r.String()]
		a.rejected[r].Store(n)
		a.m.rejected[r].Add(float64(n))
	}
	now := time.Now()
	for _, p := range sn.Pending {
		// time.Since of a wall-clock time: the handover's exec included.
		a.queue.push(Conn{FD: p.FD, Remote: p.Remote, Local: p.Local, OrigDst: p.OrigDst,
			AcceptedAt: now.Add(-time.Since(p.AcceptedAt))})
	}
	a.m.pending.Set(float64(a.queue.len()))
	if base, err := KernelCounters(); err == nil {
		a.kernelLast, a.kernelOK = base, true
	}
	a.logLimits(s, "restored from a handover", false)
	log.Info("admission: restored", zap.Stringer("address", a.addr), zap.Int("pending", a.queue.len()),
		zap.Int64("active", a.active.Load()), zap.Duration("frozen_for", time.Since(sn.FrozenAt)))
	sn.Listener, sn.Pending, sn.from = -1, nil, nil
	return a, nil
}

// clearCloexec clears FD_CLOEXEC on fd, so that it survives an execve.
func clearCloexec(fd int) error {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		return err
	}
	_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFD, fl&^unix.FD_CLOEXEC)
	return err
}
