package proxy

// Re-holding needs the request's bytes after the kernel took them: each connection
// keeps the last ReplaySize bytes of requests it sent (replayRing), copied under
// upConn.mu when they are sent. A request that is no longer there is answered as
// before.

// ReplaySize is how many bytes of recently sent requests each provider connection
// keeps for re-holding. It covers every request in flight on a connection up to
// this many bytes; larger frames are never kept.
const ReplaySize = 64 << 10

// replayRing keeps the bytes of recently sent request frames by stream offset. It
// is guarded by its upConn's mu; frames are put in stream order.
type replayRing struct {
	buf []byte
	end uint64 // stream offset just past the last frame put
}

func (r *replayRing) put(off uint64, frame []byte) {
	if len(frame) > ReplaySize {
		return
	}
	if r.buf == nil {
		r.buf = make([]byte, ReplaySize)
	}
	n := copy(r.buf[off%ReplaySize:], frame)
	copy(r.buf, frame[n:])
	r.end = off + uint64(len(frame))
}

// copyOut returns a copy of the frame put at off, if no later frame overwrote it.
func (r *replayRing) copyOut(off uint64, n int) ([]byte, bool) {
	if r.buf == nil || n <= 0 || n > ReplaySize || off+uint64(n) > r.end || r.end-off > ReplaySize {
		return nil, false
	}
	out := make([]byte, n)
	m := copy(out, r.buf[off%ReplaySize:])
	copy(out[m:], r.buf)
	return out, true
}

// replayCopy returns a copy of the request frame sent at off.
func (uc *upConn) replayCopy(off uint64, n int) ([]byte, bool) {
	uc.mu.Lock()
	defer uc.mu.Unlock()
	return uc.ring.copyOut(off, n)
}
