package triple

// h2Delivery collects what one read from a provider connection owes each consumer, so that the frames of
// an answer (its head, message and trailers), and of every answer the read carried for the same consumer,
// leave in one write(2) at the end of the read instead of one each. It belongs to the provider
// connection's reader (h2Upstream.readLoop), which passes it down to the sessions it delivers to and
// flushes it before it reads again, and before it gives up on the connection.
//
// A session that holds delivered bytes (h2Session.pend) appends everything else it sends after them, from
// any goroutine, until the flush: frames leave in the order they were made. So bytes wait in pend no
// longer than the reader takes to go through the frames of one read (at most 64 KiB).
type h2Delivery struct {
	sessions []*h2Session // the sessions with bytes in pend, in the order they got them
}

// h2BufKeep is the largest buffer a session keeps between uses (pend, its frame scratch h2Session.out,
// its partial-frame buffer h2Session.in); a larger one (a big answer, a big request) is dropped, so that
// an idle consumer does not keep what a burst made it grow to: kept up to 64 KiB each, 10,000 Triple
// consumers with bodies of up to 256 KiB held 700 MiB (the Triple soak, TestH2IdleSessionKeepsLittle).
const h2BufKeep = 4 << 10

// flush writes every session's pend.
func (d *h2Delivery) flush() {
	for i, h := range d.sessions {
		h.mu.Lock()
		if len(h.pend) > 0 {
			h.consumer.Write(h.pend)
		}
		if cap(h.pend) <= h2BufKeep {
			h.pend = h.pend[:0]
		} else {
			h.pend = nil
		}
		h.pendQueued = false
		h.mu.Unlock()
		d.sessions[i] = nil
	}
	d.sessions = d.sessions[:0]
}

// writeLocked hands b to the consumer's writer: through d, to leave with the rest of the read, or
// behind bytes already waiting in pend, or at once.
func (h *h2Session) writeLocked(b []byte, d *h2Delivery) {
	switch {
	case len(b) == 0:
	case d != nil:
		h.pend = append(h.pend, b...)
		if !h.pendQueued {
			h.pendQueued = true
			d.sessions = append(d.sessions, h)
		}
	case len(h.pend) > 0:
		h.pend = append(h.pend, b...)
	default:
		h.consumer.Write(b)
	}
}
