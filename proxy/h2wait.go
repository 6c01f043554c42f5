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
	t turns[*h2Session, *h2Call, h2CallTurns]
}

// h2CallTurns: a call waiting for a stream costs one turn.
type h2CallTurns struct{}

func (h2CallTurns) key(c *h2Call) *h2Session { return c.sess }
func (h2CallTurns) cost(*h2Call) int         { return 1 }
func (h2CallTurns) quantum() int             { return 1 }

func (w *h2Waiting) len() int { return w.t.len() }

// push queues c behind its consumer's other waiting calls.
func (w *h2Waiting) push(c *h2Call) { w.t.push(c) }

// pop takes the next call in turn; nil when none waits.
func (w *h2Waiting) pop() *h2Call {
	c, _ := w.t.pop()
	return c
}

// remove takes c out wherever it waits (its consumer reset it, it expired, it was refused); false when it
// was not waiting.
func (w *h2Waiting) remove(c *h2Call) bool {
	_, ok := w.t.remove(c.sess, func(x **h2Call) bool { return *x == c })
	return ok
}

// all takes out every waiting call (the pool closes).
func (w *h2Waiting) all() []*h2Call { return w.t.takeAll() }
