package triple

import (
	"time"

	"go.uber.org/zap"
)

// The zero-window stall guard (docs/design.md §14.3): an HTTP/2 consumer that keeps a stream's window
// shut while its answer waits in Stormgate gets that stream reset (RST_STREAM CANCEL) once
// limits.frame_read_timeout has passed since the last answer byte went to it; the bytes kept for it are
// dropped and its provider stream is ended. The same setting closes a consumer that leaves a frame half
// sent: both bound how long a consumer may leave a transfer unfinished. (The per-consumer byte bound,
// limits.max_queued_bytes_per_connection, still closes a consumer that stalls many streams at once.)
//
// One wheel timer per session (h2Session.stall), armed when an answer starts waiting for the consumer's
// window and re-armed for the next stream due (h2.Conn.NextStall) while any waits. The resets spend the
// consumer's reset budget (CVE-2025-8671): a consumer that provokes them too fast is closed with GOAWAY
// ENHANCE_YOUR_CALM.

// armStallLocked starts the stall check when a stream's answer waits for the consumer's window (under
// h.mu). A check already due is left as it is: it re-arms itself for whatever waits then.
func (h *h2Session) armStallLocked() {
	env := h.env
	t := env.Config().FrameReadTimeout
	if t <= 0 || h.closed || h.stall.Scheduled() {
		return
	}
	h.conn.SetStallTimeout(t)
	if at, ok := h.conn.NextStall(); ok {
		env.Wheel().ScheduleAt(&h.stall, time.Unix(0, at))
	}
}

// onStall runs on the wheel goroutine: every stream stalled past the timeout is reset and its call ended.
func (h *h2Session) onStall() {
	env := h.env
	t := env.Config().FrameReadTimeout
	h.mu.Lock()
	// A live change to 0 turns the guard off; after a connection error the connection is going away.
	if h.closed || h.conn == nil || t <= 0 || h.consumer.Closing() {
		h.mu.Unlock()
		return
	}
	h.conn.SetStallTimeout(t)
	now := env.Now()
	var (
		ended   []*h2Call
		dropped []int
		err     error
	)
	for {
		id, ok, e := h.conn.CheckStalls(now)
		if !ok {
			break
		}
		if c, ok := h.calls.Get(id); ok {
			ended = append(ended, c)
			dropped = append(dropped, h.discardLocked(c))
			h.finishLocked(c)
		}
		if err = e; err != nil {
			break
		}
	}
	h.flushLocked() // counts the resets and a guard's trip
	if at, ok := h.conn.NextStall(); ok && err == nil {
		env.Wheel().ScheduleAt(&h.stall, time.Unix(0, at))
	}
	h.mu.Unlock()
	for i, c := range ended {
		h.hp.cancel(c)
		h.hp.answerConsumed(c, dropped[i])
	}
	if len(ended) > 0 {
		env.Log().Info("reset HTTP/2 streams whose consumer kept the window shut for limits.frame_read_timeout",
			zap.Stringer("peer", h.consumer.Remote()), zap.Int("streams", len(ended)), zap.Duration("frame_read_timeout", t))
	}
	if err != nil {
		env.Log().Warn("closing HTTP/2 consumer after a connection error (GOAWAY sent)",
			zap.Stringer("peer", h.consumer.Remote()), zap.Error(err))
		h.closeAfterGoAway()
	}
}
