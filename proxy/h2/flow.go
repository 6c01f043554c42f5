package h2

// Flow control (RFC 9113 §5.2, §6.9). A window is an int64 so that a SETTINGS_INITIAL_WINDOW_SIZE decrease
// can take it below zero (§6.9.2) and an overflow past 2^31-1 is seen rather than wrapped.

var (
	errConnWindowOverflow = connErr(ErrCodeFlowControl, "WINDOW_UPDATE takes the connection window above 2^31-1")
	errConnRecvWindow     = connErr(ErrCodeFlowControl, "DATA beyond the connection receive window")
	errSettingsOverflow   = connErr(ErrCodeFlowControl, "SETTINGS_INITIAL_WINDOW_SIZE takes a stream window above 2^31-1")
)

// sendWindow is what this side may still send: the peer's window as the peer announced it, less what was sent.
type sendWindow int64

// grow applies a WINDOW_UPDATE increment; ok = false when the window would exceed 2^31-1 (§6.9.1).
func (w *sendWindow) grow(incr uint32) bool {
	if int64(*w)+int64(incr) > MaxWindowSize {
		return false
	}
	*w += sendWindow(incr)
	return true
}

// recvWindow is what the peer may still send and what this side consumed but has not yet handed back with a
// WINDOW_UPDATE.
type recvWindow struct {
	avail   int64 // bytes the peer may still send
	unacked int64 // consumed by the application, not yet returned to the peer
	// late is what the peer may still send beyond avail after acknowledging a smaller
	// SETTINGS_INITIAL_WINDOW_SIZE: DATA it took window for under the old size before it read the
	// SETTINGS, written after its ACK (RFC 9113 §6.9.2 has both sides subtract the difference, and a
	// sender takes window before it writes). At most the difference, once; not carried by Export.
	late int64
}

// take accounts for n received bytes; ok = false when the peer exceeded the window by more than slack
// (slack covers a SETTINGS_INITIAL_WINDOW_SIZE increase the peer may already apply before acknowledging)
// and what late leaves.
func (w *recvWindow) take(n uint32, slack int64) bool {
	within := max(w.avail+slack, 0)
	if int64(n) > within+w.late {
		return false
	}
	if over := int64(n) - within; over > 0 {
		w.late -= over
	}
	w.avail -= int64(n)
	return true
}

// consume hands n consumed bytes back; it returns the increment to announce now (0: not yet) so that
// WINDOW_UPDATEs go out once half the window is consumed, not one per DATA frame.
func (w *recvWindow) consume(n int, window uint32) uint32 {
	w.unacked += int64(n)
	if w.unacked < int64(window)/2 || w.unacked <= 0 {
		return 0
	}
	incr := min(w.unacked, MaxWindowSize)
	w.unacked -= incr
	w.avail += incr
	return uint32(incr)
}
