package proxy

// h2Waiting is the HTTP/2 calls no provider connection can open a stream for now (every one is at the
// provider's SETTINGS_MAX_CONCURRENT_STREAMS, after its GOAWAY, or not up yet), served round robin by
// consumer connection: a stream that frees goes to the next consumer with calls waiting, and each
// consumer's own calls go in arrival order. A provider stream is the scarce thing here, and streams are
// taken one per call whatever their size, so the turns count calls, not bytes (the send queue's deficit
// round robin, sendq.go, counts bytes for the same reason on Dubbo's shared connections).
//
// Served in arrival order instead, twenty consumers that each open a hundred streams for answers they
// never read queue two thousand calls in front of everyone else's: a well-behaved call waited behind
// all of them (p99 0.6-0.7 s against 1.5 ms without them, e2e TestH2SlowConsumersCostOthersNothing).
// Round robin, it waits for about one stream per consumer with calls waiting.
//
// Guarded by its h2Pool's mu.
type h2Waiting struct {
	flows  map[*h2Session]*h2Flow
	active []*h2Flow // consumers with calls waiting, in turn order; active[next] is served next
	next   int
	n      int
}

// h2Flow is one consumer connection's waiting calls, oldest first.
type h2Flow struct {
	sess *h2Session
	q    []*h2Call
}

func (w *h2Waiting) len() int { return w.n }

// push queues c behind its consumer's other waiting calls.
func (w *h2Waiting) push(c *h2Call) {
	if w.flows == nil {
		w.flows = make(map[*h2Session]*h2Flow)
	}
	f := w.flows[c.sess]
	if f == nil {
		f = &h2Flow{sess: c.sess}
		w.flows[c.sess] = f
		w.active = append(w.active, f)
	}
	f.q = append(f.q, c)
	w.n++
}

// pop takes the next call in turn; nil when none waits.
func (w *h2Waiting) pop() *h2Call {
	if w.n == 0 {
		return nil
	}
	if w.next >= len(w.active) {
		w.next = 0
	}
	f := w.active[w.next]
	c := f.q[0]
	f.q[0] = nil
	f.q = f.q[1:]
	w.n--
	if len(f.q) == 0 {
		w.forget(w.next) // the next consumer moves into this turn
	} else {
		w.next++
	}
	return c
}

// remove takes c out wherever it waits (its consumer reset it, it expired, it was refused); false when it
// was not waiting.
func (w *h2Waiting) remove(c *h2Call) bool {
	f := w.flows[c.sess]
	if f == nil {
		return false
	}
	for i, x := range f.q {
		if x != c {
			continue
		}
		f.q = append(f.q[:i], f.q[i+1:]...)
		w.n--
		if len(f.q) == 0 {
			for j, a := range w.active {
				if a == f {
					w.forget(j)
					if j < w.next {
						w.next--
					}
					break
				}
			}
		}
		return true
	}
	return false
}

// all takes out every waiting call (the pool closes).
func (w *h2Waiting) all() []*h2Call {
	var cs []*h2Call
	for _, f := range w.active {
		cs = append(cs, f.q...)
	}
	*w = h2Waiting{}
	return cs
}

// forget drops the empty flow at active[i].
func (w *h2Waiting) forget(i int) {
	delete(w.flows, w.active[i].sess)
	w.active = append(w.active[:i], w.active[i+1:]...)
	if w.next > len(w.active) {
		w.next = 0
	}
}
