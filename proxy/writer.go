package proxy

import (
	"errors"
	"golang.org/x/sys/unix"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Writer owns the outgoing bytes of one socket. Consumer sessions and upstream
// connections both send through one, so there is one write path to get right.
//
// What it promises:
//   - No caller ever blocks on a slow peer: a send writes at once with one
//     non-blocking write(2) when nobody else is writing (straight from the caller's
//     memory, no copy), and otherwise queues a copy behind the bytes already queued.
//   - Bytes leave in send order, each frame whole and exactly once: a buffer is owned
//     either by the senders (q, appended under mu) or by the goroutine holding the
//     writer role (batch, read by write(2)), never both; a fully written batch becomes
//     the next q (spare) only once nothing reads it any more.
//   - Write combining: frames queued while another goroutine writes go out together,
//     many frames per system call under load.
//   - When the kernel refuses bytes (EAGAIN or a short write) the writer is stalled:
//     a flusher goroutine waits for the socket through Go's poller and finishes the
//     queue; senders keep queueing. Stalled bytes are charged to the process-wide
//     budget, and the owner learns when the stall began (writeStalled) and how long it has
//     lasted without progress (stalledFor), to enforce a write deadline.
//   - An owner that keeps its own queue (upConn's send queue, sendq.go) asks with
//     tryTake, which refuses a frame the writer cannot take at once (stalled, held,
//     or a batch of writeBatch bytes already waiting); the owner is then told when
//     the writer role is free again (writerIdle, or idle from writeClaimed), so that
//     it decides what goes next.
//   - Every byte has a stream offset (send returns the frame's). After close, written
//     is final: a frame ending at or before it was handed to the kernel (the peer may
//     have it); a frame ending after it never left whole, and copyFrame returns its
//     bytes so the owner can send it elsewhere.
//
// Lock order: the owner's lock (upConn.mu) -> mu; fdMu is held only around write(2)
// and the written counter, and never while taking mu.
//
// A Writer lives in every consumer session, so its size is part of what an idle
// connection costs (docs/benchmarks.md): what all writers of a server share is in env,
// and the owner is an interface rather than two closures.
type Writer struct {
	fd      int
	env     *writerEnv
	owner   WriterOwner
	batches *countHist // frames per write(2); nil: not observed
	// mustTake: the owner cannot take a frame back once made (an HTTP/2 provider connection: its
	// Conn has counted the frame in its windows and stream states), so take never refuses one while
	// stalled; the bytes are charged to the budget by force, and what the budget refuses is
	// refused upstream of the writer (the hold queue, kept requests).
	mustTake bool

	mu         sync.Mutex
	q          []byte // queued behind the batch, whole frames
	qFrames    int
	spare      []byte // an empty buffer for q: the last fully written batch
	batch      []byte // owned by the writer role; batch[:sent] is written
	sent       int
	batchOff   uint64 // stream offset of batch[0]
	appended   uint64 // stream offset just past the last byte sent or queued
	writing    bool   // a goroutine holds the writer role
	stalled    bool   // the flusher holds the role
	closed     bool
	held       bool // a handover: senders queue, nobody writes (hold, export, resume)
	notify     bool // the owner waits to be told the role is free (tryTake refused, claimable)
	fdClosed   bool // under fdMu
	charged    int  // stalled bytes charged to budget
	progressAt int64
	file       *os.File // while the flusher runs: a dup of fd registered with Go's poller
	err        error    // the socket error that ended writing

	fdMu    sync.Mutex    // around write(2) and fdClosed: close waits for a write in progress
	written atomic.Uint64 // stream offset: bytes handed to the kernel; changes under fdMu
}

// writerEnv is what the writers of one server share.
type writerEnv struct {
	now    func() int64                        // clock, unix nanos
	spawn  func(func())                        // starts the flusher under the server's WaitGroup
	budget *Budget                             // stalled bytes are charged here
	sys    func(fd int, b []byte) (int, error) // tests: replaces write(2)
}

// WriterOwner is told what the writer's caller cannot see.
type WriterOwner interface {
	// WriteStalled: a stall began (the kernel refused bytes); runs on the sender's
	// goroutine, after the writer's lock is released.
	WriteStalled()
	// WriteFailed: the flusher hit a socket error (never called by Send, whose caller
	// gets the error itself), unless the owner had closed the writer.
	WriteFailed(err error)
	// WriterIdle: the flusher (or a resume) released the writer role while the owner
	// waited for it (tryTake refused, or claimable said no); runs on that goroutine,
	// with no lock held. A sender that releases the role learns it from writeClaimed.
	WriterIdle()
}

// Errors send returns when it refuses a frame; the frame was not queued.
var (
	errWriterClosed = errors.New("connection closed")
	errQueueFull    = errors.New("send queue full")
	errOverBudget   = errors.New("process buffer budget exhausted (limits.max_buffered_bytes)")
)

// SpareKeep caps the buffer a writer keeps for reuse between batches, so that one
// burst does not pin megabytes on an idle connection.
const SpareKeep = 64 << 10

// Send queues b whole or refuses it whole. It returns b's stream offset and
// accepted=true when b is in the stream (written, or held by the writer until
// written or closed); err is then non-nil only when the socket failed, and the owner
// must close the connection (the unwritten bytes stay readable through copyFrame).
// With accepted=false, err says why b was refused (closed, queue full, over budget).
// maxQueued bounds the bytes waiting in the writer; an empty writer always takes b.
// b may be reused by the caller once Send returns.
func (w *Writer) Send(b []byte, maxQueued int) (off uint64, accepted bool, err error) {
	off, claimed, accepted, err := w.take(b, maxQueued)
	if claimed {
		var idle bool
		if err, idle = w.writeClaimed(b); idle {
			w.owner.WriterIdle() // an owner with a queue (tryTake) waited behind this write
		}
	}
	return off, accepted, err
}

// tryTake is take for an owner with a queue of its own: it refuses b (accepted
// false, err nil) unless the writer takes it at once, that is unless nobody writes
// (b is claimed, as in take) or the goroutine that writes is not stalled and fewer
// than batch bytes wait behind it (b is appended; an empty queue takes any b). A
// refusal asks for writerIdle (or idle from writeClaimed) when the role is free.
// While held (a handover) it refuses everything. err is errWriterClosed once closed.
func (w *Writer) tryTake(b []byte, batch int) (off uint64, claimed, accepted bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return 0, false, false, errWriterClosed
	case w.held || w.stalled || w.writing && len(w.q) > 0 && len(w.q)+len(b) > batch:
		w.notify = true
		return 0, false, false, nil
	}
	off = w.appended
	w.appended += uint64(len(b))
	if w.writing {
		w.q = append(w.q, b...)
		w.qFrames++
		return off, false, true, nil
	}
	w.writing = true
	w.batch, w.batchOff, w.sent = b, off, 0
	return off, true, true, nil
}

// Claimable reports whether nobody holds the writer role (nor a handover), so that
// the next take claims it; when not, the owner will be told (writerIdle).
func (w *Writer) Claimable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.writing && !w.held && !w.closed {
		return true
	}
	w.notify = !w.closed
	return false
}

// take is send's first half, for an owner that must record b's offset under its own
// lock before any byte of b can reach the peer, but should not hold that lock across
// write(2) (upConn: the pending entry must exist before an answer can come back, and
// senders on other pollers should queue behind the write, not wait for it). Under mu
// it puts b in the stream: queued behind what is being written (a copy), or, when
// nobody writes, as the batch itself with the writer role (claimed). A caller that
// claimed must call writeClaimed(b) next, and keep b untouched until it returns; in
// between, b is the writer's batch (a close copies it from there). accepted and err
// are send's.
func (w *Writer) take(b []byte, maxQueued int) (off uint64, claimed, accepted bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.takeLocked(b, maxQueued, false)
}

// takeLocked is take; with own, a claimed b is copied into the writer's buffer (takeCopy).
func (w *Writer) takeLocked(b []byte, maxQueued int, own bool) (off uint64, claimed, accepted bool, err error) {
	if w.closed {
		return 0, false, false, errWriterClosed
	}
	off = w.appended
	if w.writing || w.held {
		if queued := int(off - w.written.Load()); maxQueued > 0 && queued > 0 && queued+len(b) > maxQueued {
			return 0, false, false, errQueueFull
		}
		if w.stalled {
			if w.mustTake {
				w.env.budget.Force(len(b))
			} else if !w.env.budget.TryReserve(len(b)) {
				return 0, false, false, errOverBudget
			}
			w.charged += len(b)
		}
		w.q = append(w.q, b...)
		w.qFrames++
		w.appended += uint64(len(b))
		return off, false, true, nil
	}
	// Nobody writes: b will be written straight from the caller's memory (own: from
	// the writer's copy). Until the caller takes mu again (writeClaimed), batch is the
	// caller's b, so a close in between can still copy it.
	w.writing = true
	w.appended += uint64(len(b))
	if own {
		b = append(w.takeSpare(len(b)), b...)
	}
	w.batch, w.batchOff, w.sent = b, off, 0
	return off, true, true, nil
}

// TakeCopy is take for an owner that reuses b as soon as take returns (an HTTP/2 provider
// connection builds every batch in one scratch buffer under its pool's lock, and writes after
// the lock is released): a claimed b is copied into the writer's own buffer, and the caller
// then calls writeTaken, not writeClaimed(b). Queue bounds are the owner's (maxQueued 0).
func (w *Writer) TakeCopy(b []byte) (off uint64, claimed, accepted bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.takeLocked(b, 0, true)
}

// WriteTaken is writeClaimed for a caller that claimed the role in takeCopy: the batch is
// the writer's own, and is kept for reuse once written.
func (w *Writer) WriteTaken() (err error, idle bool) {
	if w.batches != nil {
		w.batches.observe(1)
	}
	// The batch is the role's: nobody else changes it until the role is released.
	if whole, err := w.writeBatch(w.batch); !whole {
		return err, false
	}
	return w.run()
}

// writeBatch is one write(2) of the role's batch b: whole when all of it went (kept for
// reuse), else the stall or the failure is handled (stallOrFail) and its error returned.
func (w *Writer) writeBatch(b []byte) (whole bool, err error) {
	n, werr := w.write(b)
	w.mu.Lock()
	w.sent = n
	if n == len(b) {
		w.recycleLocked(b)
		w.mu.Unlock()
		return true, nil
	}
	return false, w.stallOrFail(werr)
}

// Busy reports whether a goroutine still holds the writer role with bytes to write (a
// sender or the flusher); if so, the owner is told when it releases it (writerIdle).
func (w *Writer) Busy() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !w.writing {
		return false
	}
	w.notify = true
	return true
}

// writeClaimed is send's second half for a caller that claimed the writer role in
// take: one write(2) of b, then whatever was queued behind it meanwhile, until the
// queue is empty or the socket stalls (the flusher then holds the role). Its error
// is send's err; idle reports that it released the role while the owner waited for
// it (tryTake refused meanwhile): the caller then serves the owner's queue.
func (w *Writer) writeClaimed(b []byte) (err error, idle bool) {
	if w.batches != nil {
		w.batches.observe(1)
	}
	n, werr := w.write(b)
	w.mu.Lock()
	if n == len(b) {
		w.batch, w.sent = nil, 0
		w.mu.Unlock()
		return w.run()
	}
	// The kernel took part of b or none: keep all of b (its written prefix too) so that
	// the frame can be re-sent whole elsewhere if this connection dies before it leaves.
	w.batch = append(w.takeSpare(len(b)), b...)
	w.sent = n
	return w.stallOrFail(werr), false
}

// run writes what was queued while this goroutine held the writer role, until the
// queue is empty (role released; idle as in writeClaimed) or the socket stalls (role
// passed to the flusher).
func (w *Writer) run() (err error, idle bool) {
	for {
		w.mu.Lock()
		if w.closed || w.held || len(w.q) == 0 {
			w.writing = false
			idle = w.notify && !w.closed && !w.held
			if idle {
				w.notify = false
			}
			w.mu.Unlock()
			return nil, idle
		}
		b, frames := w.q, w.qFrames
		w.batch, w.batchOff, w.sent = b, w.appended-uint64(len(b)), 0
		w.q, w.qFrames, w.spare = w.spare[:0], 0, nil
		w.mu.Unlock()
		if w.batches != nil {
			w.batches.observe(frames)
		}
		if whole, err := w.writeBatch(b); !whole {
			return err, false
		}
	}
}

// stallOrFail handles a write that came up short; called with mu held, returns with
// it released. EAGAIN or a short write starts a stall; anything else is a socket
// error, returned to the sender (who owns closing).
func (w *Writer) stallOrFail(werr error) error {
	if werr != nil && werr != unix.EAGAIN {
		w.err = werr
		w.mu.Unlock()
		return werr
	}
	if w.closed || w.held { // a held writer keeps its batch for export or resume
		w.writing = false
		w.mu.Unlock()
		return nil
	}
	w.stalled = true
	w.progressAt = w.env.now()
	w.charged = len(w.batch) - w.sent + len(w.q)
	w.env.budget.Force(w.charged)
	w.mu.Unlock()
	w.owner.WriteStalled()
	w.env.spawn(w.flush)
	return nil
}

// flush runs on its own goroutine while the writer is stalled: it waits for the
// socket through Go's poller (on a dup of fd, so that netpoll keeps its own
// registration) and writes the batch and everything queued behind it, then hands
// the writer role back.
func (w *Writer) flush() {
	f, err := w.pollable()
	if err != nil {
		w.fail(err)
		return
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		w.fail(err)
		return
	}
	for {
		w.mu.Lock()
		if w.closed {
			w.mu.Unlock()
			return
		}
		if w.sent == len(w.batch) {
			w.recycleLocked(w.batch)
			if len(w.q) == 0 {
				w.stalled, w.writing, w.file = false, false, nil
				w.env.budget.Release(w.charged)
				w.charged = 0
				idle := w.notify
				w.notify = false
				w.mu.Unlock()
				if idle {
					w.owner.WriterIdle()
				}
				return
			}
			b, frames := w.q, w.qFrames
			w.batch, w.batchOff, w.sent = b, w.appended-uint64(len(b)), 0
			w.q, w.qFrames, w.spare = w.spare[:0], 0, nil
			if w.batches != nil {
				w.batches.observe(frames)
			}
		}
		if w.held { // a handover: leave the rest to whoever resumes the writer
			w.file, w.stalled, w.writing = nil, false, false
			w.env.budget.Release(w.charged)
			w.charged = 0
			w.mu.Unlock()
			return
		}
		rest := w.batch[w.sent:]
		w.mu.Unlock()

		n, werr := w.writeWhenReady(rc, rest)
		w.mu.Lock()
		w.sent += n
		if n > 0 {
			w.progressAt = w.env.now()
			w.env.budget.Release(n)
			w.charged -= n
		}
		held := w.held
		w.mu.Unlock()
		if werr != nil && !held { // hold closes the file under us: not a socket error
			w.fail(werr)
			return
		}
	}
}

// pollable registers a dup of the socket with Go's poller, for waiting on
// writability off netpoll's pollers. close closes it, which wakes the flusher.
func (w *Writer) pollable() (*os.File, error) {
	nfd, err := unix.FcntlInt(uintptr(w.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "stormgate-writer")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		f.Close()
		return nil, errWriterClosed
	}
	w.file = f
	return f, nil
}

// writeWhenReady writes b once the socket takes bytes; it returns after one write
// that took some, or an error.
func (w *Writer) writeWhenReady(rc interface {
	Write(func(uintptr) bool) error
}, b []byte) (n int, err error) {
	var werr error
	perr := rc.Write(func(fd uintptr) bool {
		n, werr = w.writeTo(int(fd), b)
		return werr != unix.EAGAIN || n > 0
	})
	if werr == unix.EAGAIN {
		werr = nil
	}
	if werr == nil && perr != nil {
		werr = perr
	}
	return n, werr
}

// fail ends a flusher on an error: the owner is told unless it closed the writer.
func (w *Writer) fail(err error) {
	w.mu.Lock()
	closed := w.closed
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	if !closed {
		w.owner.WriteFailed(err)
	}
}

// write hands b to the kernel on the connection's own fd.
func (w *Writer) write(b []byte) (int, error) { return w.writeTo(w.fd, b) }

// writeTo is one write(2), under fdMu so that close can wait for it and so that the
// written counter and the kernel agree when close reads it.
func (w *Writer) writeTo(fd int, b []byte) (int, error) {
	w.fdMu.Lock()
	defer w.fdMu.Unlock()
	if w.fdClosed {
		return 0, errWriterClosed
	}
	var n int
	var err error
	if w.env.sys != nil {
		n, err = w.env.sys(fd, b)
	} else {
		n, err = writeFD(fd, b)
	}
	if n > 0 {
		w.written.Add(uint64(n))
	}
	return n, err
}

// writeFD is one write(2) as a raw system call: the Go scheduler is not told
// (entersyscall and exitsyscall were 2-3 % of the proxy's CPU in docs/benchmarks.md's
// profiles), which is right only because every socket Stormgate writes is
// non-blocking (accept4 and socket(2) with SOCK_NONBLOCK; handed-over fds are set
// non-blocking): the kernel copies what fits and returns at once, EAGAIN for the rest,
// so the thread never sleeps in the call while it holds its P.
func writeFD(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	for {
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// takeSpare returns an empty buffer with room for n bytes, reusing spare.
func (w *Writer) takeSpare(n int) []byte {
	b := w.spare[:0]
	w.spare = nil
	if cap(b) < n {
		return make([]byte, 0, n)
	}
	return b
}

// recycleLocked keeps a fully written batch as the next spare buffer.
func (w *Writer) recycleLocked(b []byte) {
	w.batch, w.sent = nil, 0
	if cap(b) <= SpareKeep && w.spare == nil {
		w.spare = b[:0]
	}
}

// Close stops the writer: after it returns no byte reaches the kernel. It returns
// the final written offset (see the type's doc). Idempotent.
//
// The first Close also shuts the socket down (shutdown(2), both directions): that is
// how Stormgate closes a connection. netpoll's poller then sees the hangup and runs
// the connection's close callbacks, and netpoll closes the fd, on the poller's own
// goroutine and never inside a handler: with handlers running on the pollers, a
// netpoll Close from within one would deadlock (its fd operator is busy until the
// handler returns, and the close callback waits for it). The fd is still ours here:
// netpoll closes it only after the close callbacks, and they close the writer first.
func (w *Writer) Close() uint64 {
	w.fdMu.Lock()
	if !w.fdClosed && w.fd >= 0 && w.env.sys == nil {
		_ = unix.Shutdown(w.fd, unix.SHUT_RDWR)
	}
	w.fdClosed = true
	final := w.written.Load()
	w.fdMu.Unlock()
	w.mu.Lock()
	w.closed = true
	f := w.file
	w.file = nil
	w.env.budget.Release(w.charged)
	w.charged = 0
	w.mu.Unlock()
	if f != nil {
		f.Close() // wakes a flusher waiting for the socket
	}
	return final
}

// ShutdownWrite sends FIN after the bytes the kernel holds, and keeps the socket open
// for reading: the first half of a lingering close, called when nothing waits in the
// writer (claimable, or writerIdle). Later writes fail; close ends the rest.
func (w *Writer) ShutdownWrite() {
	w.fdMu.Lock()
	defer w.fdMu.Unlock()
	if !w.fdClosed && w.fd >= 0 && w.env.sys == nil {
		_ = unix.Shutdown(w.fd, unix.SHUT_WR)
	}
}

// copyFrame appends the n bytes at stream offset off to dst, when the writer still
// holds them (they were not fully written before close). ok is false otherwise.
func (w *Writer) copyFrame(dst []byte, off uint64, n int) (out []byte, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := off + uint64(n)
	if qOff := w.appended - uint64(len(w.q)); off >= qOff && end <= w.appended {
		return append(dst, w.q[off-qOff:end-qOff]...), true
	}
	if off >= w.batchOff && end <= w.batchOff+uint64(len(w.batch)) {
		return append(dst, w.batch[off-w.batchOff:end-w.batchOff]...), true
	}
	return dst, false
}

// StreamOffset is the number of bytes ever sent through the writer (queued or written).
func (w *Writer) StreamOffset() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appended
}

// Queued is the number of bytes sent but not yet handed to the kernel.
func (w *Writer) Queued() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return int(w.appended - w.written.Load())
}

// Written is the stream offset the kernel has taken: every byte before it was handed to write(2).
func (w *Writer) Written() uint64 { return w.written.Load() }

// Closed reports whether the writer was closed (its connection is being torn down).
func (w *Writer) Closed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// StalledFor is how long the writer has been stalled without the kernel taking a
// byte; 0 when it is not stalled.
func (w *Writer) StalledFor(now int64) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stalled || w.closed {
		return 0
	}
	return max(now-w.progressAt, 1)
}

// hold stops writing for a handover: senders keep queueing, the flusher (if any)
// stops after its current write(2), and no other write(2) starts. It waits for a
// write in progress to end, so that export sees what the kernel has.
func (w *Writer) hold() {
	w.mu.Lock()
	w.held = true
	f := w.file
	w.mu.Unlock()
	if f != nil {
		f.Close() // wakes a flusher waiting for the socket; it sees held and leaves
	}
	w.fdMu.Lock() // a direct write(2) in progress has finished once this is taken
	w.fdMu.Unlock()
}

// export returns what a held writer has not handed to the kernel: out starts at a
// frame boundary, out[:sent] was written already (the head of a frame the kernel
// took part of), and base is the stream offset of out[0], so that a frame at offset
// off (off >= base) is at off-base in out. A frame that ended before base was
// written whole.
func (w *Writer) export() (out []byte, sent int, base uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.batch) > 0 {
		out = append(append(out, w.batch...), w.q...)
		return out, w.sent, w.batchOff
	}
	return append(out, w.q...), 0, w.appended - uint64(len(w.q))
}

// resume ends a hold: out (as export describes it) is written first, then whatever
// was queued since; the writer role starts on a flusher when there is anything to
// write. A writer that was never held (a new one in a restored process) takes out
// the same way.
func (w *Writer) resume(out []byte, sent int) {
	w.mu.Lock()
	w.held = false
	if out != nil { // a restored writer: its stream starts with out
		w.batch, w.sent, w.batchOff = out, sent, 0
		w.appended = uint64(len(out)) + uint64(len(w.q))
		w.written.Store(uint64(sent))
	}
	if w.writing { // a sender or flusher still holds the role and will see the queue
		w.mu.Unlock()
		return
	}
	if len(w.batch) == w.sent {
		w.batch, w.sent = nil, 0
		if len(w.q) == 0 {
			idle := w.notify
			w.notify = false
			w.mu.Unlock()
			if idle {
				w.env.spawn(w.owner.WriterIdle)
			}
			return
		}
	}
	// Something to write: the flusher takes the role (it waits for the socket if need be).
	w.writing, w.stalled = true, true
	w.progressAt = w.env.now()
	w.charged = len(w.batch) - w.sent + len(w.q)
	w.env.budget.Force(w.charged)
	w.mu.Unlock()
	w.env.spawn(w.flush)
}

// withFD runs f with the writer's fd while it is open (close waits for it), so the
// fd number cannot be closed and reused under f.
func (w *Writer) withFD(f func(fd int)) {
	w.fdMu.Lock()
	defer w.fdMu.Unlock()
	if !w.fdClosed {
		f(w.fd)
	}
}
