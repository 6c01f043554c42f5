package proxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy/wire"
)

var errClosedAtConnect = errors.New("the provider closed the connection right after accepting it")

// Upstream connection states.
const (
	stateReady    int32 = iota // takes new requests
	stateReadonly              // provider sent READONLY, or the slot is retiring: in-flight only
	stateClosed                // dead; its requests have been settled or re-held
)

// upConn is one provider connection: a writer for the requests sent on it, a frame
// reader for the provider's answers, the pending table that maps its upstream ids
// back to requests, and its liveness checks. Its lifecycle:
//
//	| step          | who runs it                          | what it does
//	|---------------|--------------------------------------|-------------------------------------------------------
//	| send          | consumer onRequest, hold dispatch    | new id, frame into the writer, pending entry, under mu
//	| onRequest     | netpoll, one at a time               | routes responses; answers the provider's heartbeats and
//	|               |                                      | callbacks; READONLY/WRITEABLE; skips oversize answers
//	| onBeat        | wheel goroutine                      | heartbeat when silent; dead when one goes unanswered
//	| onStallTimer  | wheel goroutine                      | dead when the kernel took no byte for write_timeout
//	| fail          | anyone, the first caller wins        | closes; settles what may have run, re-holds what provably
//	|               |                                      | never reached the provider (peerend.go)
//
// Lock order: HoldQueue.mu -> mu -> writer.mu. fail never runs with mu or
// HoldQueue.mu held by its caller (it re-holds), so send hands a write error to a
// goroutine of its own.
type upConn struct {
	pool *pool
	conn netpoll.Connection
	slot int

	rd       frameReader
	w        Writer
	state    atomic.Int32
	lastRead atomic.Int64
	// lastBeatAnswer is lastRead when what was read was only an answer to Stormgate's
	// own heartbeat (liveness: that is not traffic).
	lastBeatAnswer atomic.Int64
	npending       atomic.Int32
	failing        atomic.Bool
	hung           atomic.Bool // takes no new requests until the provider is heard (hung.go)
	probeAt        int64       // when a hang probe went out; 0 when none; the sweep's (hung.go)
	expected       atomic.Bool // the close is Stormgate's own (shutdown, slot retired): logged at info
	beat           keepalive.Timer
	stall          keepalive.Timer
	live           liveness // onBeat only
	done           chan struct{}
	scratch        [64]byte // onRequest only: heartbeat replies
	stash          []byte   // bytes read during a handover, not yet handled (handover.go)

	counts upCounters
	sent   atomic.Uint64 // two-way requests sent (warm-up's rate meter)
	folded bool          // counts moved to the closed totals; guarded by Server.upClosed.mu

	mu      sync.Mutex
	pending pendingTable
	sendq   sendQueue    // requests the writer could not take at once (sendq.go)
	nqueued atomic.Int32 // sendq.len(), readable without mu (pick, hang detection)
	sqTimer keepalive.Timer
	sqArmed int64      // when sqTimer fires (the earliest deadline in sendq); 0: not armed
	nextID  int64      // the connection's own id space: unique on this connection, never reused
	ring    replayRing // the bytes of the requests sent last, for re-holding (replay.go)

	notRunFrom atomic.Int64 // start of the not-executed window: connect, READONLY/WRITEABLE/closing (notrun.go)
	proof      peerProof    // what the kernel says of the provider's end (peerend.go)
	pdrain     connDrain    // its part of the provider's drain (providerdrain.go)
}

func newUpConn(p *pool, conn netpoll.Connection, fd, slot int) *upConn {
	srv := p.srv
	uc := &upConn{pool: p, conn: conn, slot: slot, done: make(chan struct{})}
	// A random start makes captures of consecutive connections easy to tell apart.
	uc.nextID = rand.Int64N(1 << 40)
	uc.w = Writer{fd: fd, env: &srv.wenv, owner: uc, batches: &uc.counts.batches}
	uc.pending.Init(256)
	now := srv.now()
	uc.lastRead.Store(now)
	uc.live.lastCheck = now
	uc.notRunFrom.Store(now)
	uc.proof.noteConnected(fd, srv.clock, &srv.diag)
	uc.beat.Init(uc.onBeat)
	uc.stall.Init(uc.onStallTimer)
	uc.sqTimer.Init(uc.expireQueued)
	return uc
}

// serve sets the connection's netpoll handlers.
func (uc *upConn) serve() error {
	srv := uc.pool.srv
	_ = uc.conn.AddCloseCallback(func(netpoll.Connection) error {
		// Synchronously, before netpoll closes the fd: no write may reach a reused fd
		// number. netpoll never runs this while onRequest runs, so the reader is ours.
		uc.notePeerEnd()
		uc.w.Close()
		uc.rd.reset(&srv.budget)
		srv.spawn(func() { uc.fail("closed by provider") })
		return nil
	})
	_ = uc.conn.SetOnRequest(uc.onRequest)
	if !uc.conn.IsActive() {
		_ = uc.conn.Close() // gone already: netpoll ran no close callback for it without a handler
		<-uc.done
		return errClosedAtConnect
	}
	return nil
}

// send puts a two-way request on this connection under a fresh upstream id. It
// returns false, leaving the request with the caller, when the connection takes no
// new requests or its send queue is full.
func (uc *upConn) send(r request, frame []byte) bool { return uc.sendIn(r, frame, false) }

// sendIn is send; readonlyOK lets a READONLY connection take the request too.
func (uc *upConn) sendIn(r request, frame []byte, readonlyOK bool) bool {
	uc.mu.Lock()
	if st := uc.state.Load(); st != stateReady && (!readonlyOK || st != stateReadonly) || uc.hung.Load() {
		uc.mu.Unlock()
		return false
	}
	return uc.dispatchLocked(r, frame, false)
}

// sendOneWay puts a one-way request of consumer s on this connection under a fresh
// id; false when the connection takes no new requests or its send queue is full.
func (uc *upConn) sendOneWay(s *session, frame []byte) bool {
	uc.mu.Lock()
	if !uc.takes() {
		uc.mu.Unlock()
		return false
	}
	return uc.dispatchLocked(request{sess: s}, frame, true)
}

// dispatchLocked hands a request to the writer when it takes it at once, or queues
// it in the send queue (sendq.go); called with mu held, it releases it. frame is the
// consumer's (netpoll's) memory: written straight from it, or copied when queued.
func (uc *upConn) dispatchLocked(r request, frame []byte, oneWay bool) bool {
	srv := uc.pool.srv
	if uc.sendq.len() == 0 {
		// tryTake, not send: write(2) happens after mu is released (writeClaimed), so that
		// senders on other pollers queue behind it (one write for many frames) instead of
		// waiting for mu, and an answer's handler is not kept waiting either. The pending
		// entry is in place before any byte can leave: whoever writes our bytes (this
		// goroutine, or the one holding the writer role) does so after tryTake returns, and
		// an answer's handler needs mu.
		id := uc.nextID + 1
		srv.codec.SetID(frame, id)
		off, claimed, ok, err := uc.w.tryTake(frame, writeBatch)
		if errors.Is(err, errWriterClosed) {
			uc.mu.Unlock()
			return false
		}
		if ok {
			uc.nextID = id
			if !oneWay {
				uc.pending.Add(id, pending{request: r, off: off, n: len(frame)})
				uc.npending.Add(1)
				uc.ring.put(off, frame)
			}
			uc.mu.Unlock()
			uc.written(r, oneWay, 1)
			if claimed {
				uc.writeBatch(frame)
			}
			return true
		}
	}
	return uc.enqueueLocked(r, frame, oneWay)
}

// written counts requests handed to the writer.
func (uc *upConn) written(r request, oneWay bool, n int) {
	if oneWay {
		r.sess.counts.oneway.Add(1)
		return
	}
	uc.sent.Add(uint64(n))
	uc.pool.armSweep()
}

// writeBatch writes b after claiming the writer role, then serves the send queue if
// a sender queued behind it meanwhile.
func (uc *upConn) writeBatch(b []byte) {
	err, idle := uc.w.writeClaimed(b)
	switch {
	case err != nil:
		uc.pool.srv.spawn(func() { uc.fail("write failed: " + err.Error()) })
	case idle:
		uc.refill()
	}
}

// sendControl writes a heartbeat reply or a callback refusal, or with beat Stormgate's
// own heartbeat, which gets an id of the connection and a pending entry so that its
// answer is recognised.
func (uc *upConn) sendControl(frame []byte, beat bool) bool {
	uc.mu.Lock()
	if uc.state.Load() == stateClosed {
		uc.mu.Unlock()
		return false
	}
	var id int64
	if beat {
		uc.nextID++
		id = uc.nextID
		uc.pool.srv.codec.SetID(frame, id)
	}
	off, ok, err := uc.w.Send(frame, 0)
	if ok && beat {
		uc.pending.Add(id, pending{request: request{arrived: uc.pool.srv.now()}, off: off, n: len(frame)})
		uc.npending.Add(1)
	}
	uc.mu.Unlock()
	if ok && beat {
		uc.pool.armSweep() // its answer is owed: hang detection looks (hung.go)
	}
	if ok && err != nil {
		uc.pool.srv.spawn(func() { uc.fail("write failed: " + err.Error()) })
	}
	return ok
}

func (uc *upConn) onRequest(_ context.Context, conn netpoll.Connection) error {
	r := conn.Reader()
	if uc.pool.srv.handover.holding() { // a handover: keep the bytes for whoever serves next
		uc.stash = stashAll(uc.stash, r)
		uc.pool.srv.handover.park()
		return nil
	}
	uc.consume(r)
	_ = r.Release()
	return nil
}

// consume handles every whole frame available in r and keeps a partial one.
func (uc *upConn) consume(r ByteSource) {
	srv := uc.pool.srv
	cfg := srv.cfg.Load()
	now := srv.now()
	uc.lastRead.Store(now)
	if uc.hung.Load() {
		uc.unhang(now)
	}
	for uc.state.Load() != stateClosed {
		f, frame, res, err := uc.rd.next(r, srv.codec, cfg.MaxFrameBytes, true, &srv.budget, now)
		if res == readMore {
			break
		}
		switch res {
		case readFrame:
			uc.handle(f, frame, now)
		case readSkipped:
			uc.skipped(f, err)
		case readBad:
			srv.log.Error("malformed frame from the provider; closing that connection",
				zap.String("provider", uc.pool.addr), zap.Int("slot", uc.slot), zap.Error(err))
			uc.fail("malformed frame from provider")
		}
	}
	if uc.state.Load() == stateClosed {
		_ = r.Skip(r.Len())
	}
}

func (uc *upConn) handle(f wire.Frame, frame []byte, now int64) {
	srv := uc.pool.srv
	switch f.Kind {
	case wire.FrameResponse:
		uc.route(f, frame, now)
	case wire.FrameEventResponse:
		// A heartbeat's answer. An event frame carrying a request's id is no answer a
		// consumer would take (Java ignores heartbeat responses): refuse the request.
		if p, ok := uc.take(f.ID); !ok {
			srv.m.unknownIDs.Inc()
		} else if !p.heartbeat() {
			srv.refuse(p.request, wire.FailBadResponse, "stormgate: the provider answered this request with an event frame", ReplyBadResponse)
		} else {
			uc.lastBeatAnswer.Store(now)
			if uc.pdrain.probe.Load() {
				uc.pool.probeAnswered(uc)
			}
		}
	case wire.FrameEventTwoWay:
		// The provider's heartbeat: its ids are its own id space; answer with its id.
		uc.counts.heartbeats.Add(1) // counted before the provider can see the reply
		uc.sendControl(srv.codec.AppendHeartbeatReply(uc.scratch[:0], f), false)
	case wire.FrameEventOneWay:
		switch srv.codec.EventOf(frame, f) {
		case wire.EventReadonly:
			uc.onReadonly()
		case wire.EventWriteable:
			uc.onWriteable()
		default:
			srv.m.dropped[dropProviderEvent].Inc()
		}
	case wire.FrameRequest:
		// A callback to a consumer: Stormgate cannot know which consumer exported it.
		var buf [192]byte
		uc.sendControl(srv.codec.AppendErrorReply(buf[:0], f, wire.FailNotRoutable,
			"stormgate: provider-to-consumer requests (callbacks) cannot be routed through Stormgate"), false)
		srv.m.dropped[dropProviderCallback].Inc()
	default:
		srv.m.dropped[dropProviderOneWay].Inc()
	}
}

// route hands a provider response back to its consumer with the original id.
func (uc *upConn) route(f wire.Frame, frame []byte, now int64) {
	p, ok := uc.take(f.ID)
	if !ok {
		uc.pool.srv.m.unknownIDs.Inc()
		return
	}
	if !p.heartbeat() {
		uc.pool.checkClosing(frame)
		if !uc.reholdNotExecuted(p, frame, now) {
			uc.pool.srv.answer(p.request, frame, now, &uc.counts)
		}
	} else {
		uc.lastBeatAnswer.Store(now) // a heartbeat answered with a plain response
		if uc.pdrain.probe.Load() {
			uc.pool.probeAnswered(uc)
		}
	}
	if uc.state.Load() == stateReadonly && uc.npending.Load() == 0 {
		uc.pool.dubbo.readonlyDrained(uc)
	}
}

// skipped settles the request whose answer cannot be delivered: over
// limits.max_frame_bytes, or no buffer memory to reassemble it. The connection
// stays: the body is discarded as it arrives.
func (uc *upConn) skipped(f wire.Frame, err error) {
	srv := uc.pool.srv
	srv.m.dropped[dropOversizeResponse].Inc()
	srv.log.Warn("dropping a provider frame that cannot be delivered", zap.String("provider", uc.pool.addr),
		zap.Int("frame_bytes", f.Len), zap.Error(err))
	if f.Kind != wire.FrameResponse && f.Kind != wire.FrameEventResponse {
		return
	}
	if p, ok := uc.take(f.ID); ok && !p.heartbeat() {
		srv.refuse(p.request, wire.FailBadResponse, "stormgate: the provider's answer cannot be delivered: "+err.Error(), ReplyBadResponse)
	}
}

func (uc *upConn) take(id int64) (pending, bool) {
	uc.mu.Lock()
	p, ok := uc.pending.Take(id)
	uc.mu.Unlock()
	if ok {
		uc.npending.Add(-1)
	}
	return p, ok
}

func (uc *upConn) onReadonly() {
	p := uc.pool
	p.srv.m.readonlyIn[0].Inc()
	uc.pdrain.gotReadonly.Store(true)
	if uc.state.CompareAndSwap(stateReady, stateReadonly) {
		p.srv.log.Info("provider sent READONLY; connection takes no new requests", zap.String("provider", p.addr),
			zap.Int("slot", uc.slot))
		p.connChanged()
		uc.requeue() // what waits in the send queue never left: it goes elsewhere or is held
	}
	p.startProviderDrain(drainReadonly)
	if uc.npending.Load() == 0 {
		p.dubbo.readonlyDrained(uc)
	}
}

func (uc *upConn) onWriteable() {
	p := uc.pool
	p.srv.m.readonlyIn[1].Inc()
	uc.pdrain.gotReadonly.Store(false)
	if !p.dubbo.retiring(uc.slot) && uc.state.CompareAndSwap(stateReadonly, stateReady) {
		p.srv.log.Info("provider sent WRITEABLE; connection takes requests again", zap.String("provider", p.addr),
			zap.Int("slot", uc.slot))
		uc.notRunFrom.Store(p.srv.now())
		p.connChanged()
		p.hold.dispatch()
	}
	p.endProviderDrain("the provider sent WRITEABLE")
}

// liveness decides, at each heartbeat check of a connection, whether to send a
// heartbeat and whether the connection is dead. Java Dubbo's rule for sending: a
// heartbeat goes out when the previous check period saw no read or no write other
// than Stormgate's own heartbeat and its answer, so an idle connection gets one every
// interval and a provider's idle timeout (3 intervals by default) never closes it.
// The connection is dead when a heartbeat has gone maxMissed intervals with nothing
// read after it. Anything read counts as its answer, so a provider that answers its
// heartbeats is never declared dead, whatever interval, jitter and maxMissed the
// settings allow (TestLivenessNeverKillsAResponsiveProvider).
type liveness struct {
	lastCheck    int64  // time of the previous check
	lastAppended uint64 // the writer's stream offset then, after our own heartbeat
	sentAt       int64  // the unanswered heartbeat's send time; 0 when none
}

// check takes the time, the last read, the last read that was only a heartbeat's
// answer, and the writer's stream offset (bytes ever queued).
func (l *liveness) check(now, lastRead, lastBeatAnswer int64, appended uint64, interval time.Duration, maxMissed int) (send, dead bool) {
	if l.sentAt != 0 && lastRead >= l.sentAt {
		l.sentAt = 0
	}
	if l.sentAt != 0 && now-l.sentAt >= int64(maxMissed)*int64(interval) {
		return false, true
	}
	readData := lastRead >= l.lastCheck && lastRead != lastBeatAnswer
	wrote := appended != l.lastAppended
	if l.sentAt == 0 && (!readData || !wrote) {
		send = true
		l.sentAt = now
	}
	l.lastCheck = now
	l.lastAppended = appended
	return send, false
}

// onBeat runs on the wheel, every upstream_interval ± jitter.
func (uc *upConn) onBeat() {
	if uc.state.Load() == stateClosed {
		return
	}
	p := uc.pool
	srv := p.srv
	cfg := srv.cfg.Load()
	if uc.proof.ackOK {
		uc.proof.noteResets() // a recent baseline for the reset counters (peerend.go)
	}
	send, dead := uc.live.check(srv.now(), uc.lastRead.Load(), uc.lastBeatAnswer.Load(), uc.w.StreamOffset(),
		cfg.UpstreamInterval, cfg.UpstreamMaxMissed)
	if dead {
		srv.spawn(func() {
			uc.fail("no answer to a heartbeat within " + (time.Duration(cfg.UpstreamMaxMissed) * cfg.UpstreamInterval).String())
		})
		return
	}
	if send {
		var buf [64]byte
		if uc.sendControl(srv.codec.AppendHeartbeatRequest(buf[:0], 0), true) {
			srv.m.hbSent.Inc()
		}
		uc.live.lastAppended = uc.w.StreamOffset() // our own heartbeat is not traffic
	}
	srv.wheel.Schedule(&uc.beat, keepalive.Jitter(cfg.UpstreamInterval, cfg.UpstreamJitter, nil))
}

// WriteFailed implements writerOwner: the flusher could not write.
func (uc *upConn) WriteFailed(err error) { uc.fail("write failed: " + err.Error()) }

// WriteStalled implements writerOwner: the kernel refused bytes, so the write
// deadline starts.
func (uc *upConn) WriteStalled() {
	if t := uc.pool.srv.cfg.Load().WriteTimeout; t > 0 {
		uc.pool.srv.wheel.Schedule(&uc.stall, t)
	}
}

// onStallTimer declares the connection dead when the kernel has taken no byte for
// upstream.write_timeout (the provider stopped reading), so that its requests are
// answered instead of waiting behind it.
func (uc *upConn) onStallTimer() {
	srv := uc.pool.srv
	t := srv.cfg.Load().WriteTimeout
	stalled := time.Duration(uc.w.StalledFor(srv.now()))
	switch {
	case t <= 0 || stalled == 0 || uc.state.Load() == stateClosed:
	case stalled >= t:
		srv.spawn(func() { uc.fail("the provider accepted no bytes for upstream.write_timeout (" + t.String() + ")") })
	default:
		srv.wheel.Schedule(&uc.stall, t-stalled)
	}
}

// close ends the connection on Stormgate's own initiative (shutdown, a retired slot).
func (uc *upConn) close(why string) {
	uc.expected.Store(true)
	uc.fail(why)
}

// fail closes the connection once and settles every request on it: a request whose
// bytes never fully left Stormgate cannot have run and goes back to the hold queue
// (sent again on the next connection), and so does one the kernel took that the
// provider's FIN or RST proves it never read (peerend.go; after a FIN this waits up
// to finConfirm); any other may or may not have run and is answered CHANNEL_INACTIVE,
// never retried by Stormgate.
func (uc *upConn) fail(why string) {
	if !uc.failing.CompareAndSwap(false, true) {
		return
	}
	p := uc.pool
	srv := p.srv
	uc.mu.Lock()
	uc.state.Store(stateClosed)
	entries := uc.pending.TakeAll()
	queued := uc.takeQueuedLocked() // never handed to the writer
	uc.mu.Unlock()
	uc.notePeerEnd()      // before the shutdown below: what the provider's kernel said
	final := uc.w.Close() // shuts the socket down: the poller then runs the close callback (fail again: a no-op)
	srv.wheel.Stop(&uc.beat)
	srv.wheel.Stop(&uc.stall)
	srv.wheel.Stop(&uc.sqTimer)
	close(uc.done)
	p.connChanged()
	p.advanceProviderDrain()

	taken := false // a request the kernel took: the proofs matter
	for _, e := range entries {
		if !e.heartbeat() && e.off+uint64(e.n) <= final {
			taken = true
			break
		}
	}
	var end peerEnd
	read, readOK := uint64(0), false
	if taken {
		read, readOK = uc.proof.providerRead(final, srv.after)
	}
	if readOK {
		end = uc.proof.readEnd(read)
	} else {
		end = uc.proof.confirmFIN(final, srv.after)
		if taken {
			end = uc.proof.vetoAbortive(end, srv.m.life.vetoed, srv.after)
		}
	}
	uc.proof.releaseDiag()
	var unsent, unseen []held
	lost := 0
	for _, e := range entries {
		uc.npending.Add(-1)
		if e.heartbeat() {
			continue
		}
		if e.off+uint64(e.n) > final {
			if b, ok := uc.w.copyFrame(nil, e.off, e.n); ok {
				unsent = append(unsent, held{request: e.request, frame: b})
				continue
			}
			srv.log.Error("BUG: an unsent request's bytes are gone; answering it as lost", zap.Uint64("offset", e.off))
		} else if end.unseen(e.off, e.n, final) {
			if b, ok := uc.ring.copyOut(e.off, e.n); ok { // nobody sends on a closed connection: no lock needed
				unseen = append(unseen, held{request: e.request, frame: b})
				continue
			}
		}
		lost++
		srv.refuse(e.request, wire.FailUpstreamLost, "stormgate: provider connection lost while the request was in flight ("+
			why+"); "+uc.proof.lostFate(end, e.off, e.n), ReplyUpstreamLost)
	}
	level := zap.WarnLevel
	if uc.expected.Load() {
		level = zap.InfoLevel
	}
	unsent = append(unsent, queued...)
	srv.log.Log(level, "provider connection closed", zap.String("provider", p.addr), zap.Int("slot", uc.slot),
		zap.String("why", why), zap.Int("failed_in_flight", lost), zap.Int("reheld_unsent", len(unsent)),
		zap.Int("reheld_unseen", len(unseen)), zap.Stringer("provider_end", end))
	p.hold.rehold(unsent, HoldReheld)
	p.hold.rehold(unseen, HoldReheldUnseen)
}

// sweep removes the requests that arrived before cutoff and are fully written,
// appending them to expired. stalled reports an older request still queued in
// Stormgate, in the writer or the send queue (left in place for fail to re-hold).
func (uc *upConn) sweep(cutoff int64, expired []pending) (_ []pending, stalled bool) {
	uc.mu.Lock()
	n := len(expired)
	expired, stalled = takeExpired(&uc.pending, cutoff, uc.w.written.Load(), expired)
	if o, ok := uc.sendq.oldest(); ok && o < cutoff {
		stalled = true // queued in Stormgate that long: fail re-holds it
	}
	uc.mu.Unlock()
	uc.npending.Add(-int32(len(expired) - n))
	// Stormgate's own heartbeats leave the table here too, and are not answered.
	kept := expired[:n]
	for _, e := range expired[n:] {
		if !e.heartbeat() {
			kept = append(kept, e)
		}
	}
	return kept, stalled
}
