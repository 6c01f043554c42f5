package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

const service = "org.stormgate.e2e.Greeter"

// fleet is n consumer connections (peer.Client) to one address.
type fleet struct {
	conns  []*consumer
	watch  bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // watcher goroutines
}

// consumer is one connection with the server requests (events) it received.
type consumer struct {
	idx int
	c   *peer.Client
	ids atomic.Int64

	mu       sync.Mutex
	events   []event
	readonly bool      // the last READONLY/WRITEABLE event received was READONLY
	closedAt time.Time // watch mode: when the reader saw the connection end
}

type event struct {
	at  time.Time
	raw []byte
	ev  byte // 'R', 'W' or 0
}

// dialFleet opens n connections to addr. With watch set, one goroutine per connection
// records events and the connection's end as they happen (accurate timestamps);
// without it, events are collected when asked for (cheaper for large fleets).
func dialFleet(t *testing.T, addr string, n int, watch bool) *fleet {
	t.Helper()
	f := &fleet{conns: make([]*consumer, n), watch: watch}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	t.Cleanup(f.close)

	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := atomic.Int64{}
	for range min(n, 64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
				c, err := peer.Dial(ctx, addr, 0)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("consumer %d: %w", i, err)
					continue
				}
				f.conns[i] = &consumer{idx: i, c: c}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("dial %d consumers to %s: %v", n, addr, err)
	}
	if watch {
		for _, c := range f.conns {
			f.wg.Add(1)
			go func() { defer f.wg.Done(); c.watch(f.ctx) }()
		}
	}
	return f
}

func (f *fleet) close() {
	for _, c := range f.conns {
		if c != nil {
			_ = c.c.Close()
		}
	}
	f.cancel()
	f.wg.Wait()
}

func (c *consumer) watch(ctx context.Context) {
	for {
		select {
		case fr := <-c.c.Events():
			c.record(fr)
		case <-c.c.Closed():
			c.mu.Lock()
			c.closedAt = time.Now()
			c.mu.Unlock()
			c.drainEvents()
			return
		case <-ctx.Done():
			return
		}
	}
}

func (c *consumer) record(fr peer.Frame) {
	e := event{at: time.Now(), raw: fr.Raw, ev: fr.Event()}
	c.mu.Lock()
	c.events = append(c.events, e)
	switch e.ev {
	case 'R':
		c.readonly = true
	case 'W':
		c.readonly = false
	}
	c.mu.Unlock()
}

// drainEvents records every event waiting in the client's channel.
func (c *consumer) drainEvents() {
	for {
		select {
		case fr := <-c.c.Events():
			c.record(fr)
		default:
			return
		}
	}
}

func (c *consumer) snapshot() (events []event, readonly bool, closedAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]event(nil), c.events...), c.readonly, c.closedAt
}

// collectEvents pulls pending events into the records (needed without watch mode).
func (f *fleet) collectEvents() {
	if f.watch {
		return
	}
	for _, c := range f.conns {
		c.drainEvents()
	}
}

// call is one two-way request and its outcome.
type call struct {
	conn      int
	id        int64
	scheduled time.Time
	sent      time.Time // just before the write
	done      time.Time // response (or error) received
	resp      peer.Response
	err       error
}

func (c *call) ok() bool               { return c.err == nil && c.resp.Status == 20 }
func (c *call) latency() time.Duration { return c.done.Sub(c.sent) }

type streamConfig struct {
	rate     float64       // requests per second across the fleet
	duration time.Duration // scheduling stops after this
	method   string
	arg      string
	timeout  time.Duration // per request; a request without an answer by then is a timeout
	// sendTimeout puts timeout in each request's `timeout` attachment, as Java and
	// dubbo-go consumers do (Stormgate then holds it up to that deadline, never past).
	sendTimeout bool
	// honorReadonly skips connections that received READONLY (until WRITEABLE), as a
	// Dubbo consumer does. A request with no usable connection is not sent (counted).
	honorReadonly bool
}

// stream sends requests open-loop at a fixed rate, round robin over the fleet.
type stream struct {
	f     *fleet
	cfg   streamConfig
	start time.Time

	mu     sync.Mutex
	calls  []*call
	unsent int

	inflight sync.WaitGroup // one per request in flight
	done     chan struct{}  // closed when scheduling has ended and every request has its outcome
}

func (f *fleet) startStream(cfg streamConfig) *stream {
	if cfg.timeout == 0 {
		cfg.timeout = 8 * time.Second
	}
	s := &stream{f: f, cfg: cfg, start: time.Now(), done: make(chan struct{})}
	// The fleet owns the stream: its close cancels f.ctx (ending scheduling and every
	// call) and waits for this goroutine, which waits for the calls.
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		s.run()
		s.inflight.Wait()
		close(s.done)
	}()
	return s
}

func (s *stream) run() {
	total := int(s.cfg.rate * s.cfg.duration.Seconds())
	interval := time.Duration(float64(time.Second) / s.cfg.rate)
	n := len(s.f.conns)
	rr := 0
	for k := 0; k < total; k++ {
		due := s.start.Add(time.Duration(k) * interval)
		if d := time.Until(due); d > 0 {
			select {
			case <-time.After(d):
			case <-s.f.ctx.Done():
				return
			}
		}
		var cons *consumer
		for range n {
			c := s.f.conns[rr%n]
			rr++
			if s.cfg.honorReadonly {
				if !s.f.watch {
					c.drainEvents()
				}
				c.mu.Lock()
				ro := c.readonly
				c.mu.Unlock()
				if ro {
					continue
				}
			}
			cons = c
			break
		}
		if cons == nil {
			s.mu.Lock()
			s.unsent++
			s.mu.Unlock()
			continue
		}
		cl := &call{conn: cons.idx, id: cons.ids.Add(1), scheduled: due}
		s.mu.Lock()
		s.calls = append(s.calls, cl)
		s.mu.Unlock()
		s.inflight.Add(1)
		go func() {
			defer s.inflight.Done()
			ctx, cancel := context.WithTimeout(s.f.ctx, s.cfg.timeout)
			defer cancel()
			var attach time.Duration
			if s.cfg.sendTimeout {
				attach = s.cfg.timeout
			}
			cl.sent = time.Now()
			cl.resp, cl.err = cons.c.CallTimeout(ctx, cl.id, service, s.cfg.method, s.cfg.arg, attach)
			cl.done = time.Now()
		}()
	}
}

// wait waits for the scheduler and every request's outcome, bounded by d.
func (s *stream) wait(t *testing.T, d time.Duration) []*call {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(d):
		t.Fatalf("request stream did not finish within %v", d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*call(nil), s.calls...)
}

// tally counts outcomes: every sent request is exactly one of ok, an error status,
// a timeout, or a connection error.
type tally struct {
	sent, ok, timeouts, connErrs int
	byStatus                     map[byte]int // non-20 statuses
	firstConnErr                 error
}

func (t tally) errors() int {
	n := 0
	for _, v := range t.byStatus {
		n += v
	}
	return n
}

func (t tally) String() string {
	return fmt.Sprintf("sent=%d ok=%d error_responses=%v timeouts=%d conn_errors=%d", t.sent, t.ok, t.byStatus,
		t.timeouts, t.connErrs)
}

func count(calls []*call) tally {
	t := tally{byStatus: map[byte]int{}}
	for _, c := range calls {
		t.sent++
		switch {
		case c.err == nil && c.resp.Status == 20:
			t.ok++
		case c.err == nil:
			t.byStatus[c.resp.Status]++
		case errors.Is(c.err, context.DeadlineExceeded):
			t.timeouts++
		default:
			t.connErrs++
			if t.firstConnErr == nil {
				t.firstConnErr = c.err
			}
		}
	}
	return t
}

// unexpected is the number of responses nobody waited for, over the fleet: duplicates
// or answers to ids never sent.
func (f *fleet) unexpected() uint64 {
	var n uint64
	for _, c := range f.conns {
		n += c.c.Stats().Unexpected
	}
	return n
}

// closedConns is the number of consumer connections that have ended.
func (f *fleet) closedConns() (n int, first error) {
	for _, c := range f.conns {
		if err := c.c.Err(); err != nil {
			n++
			if first == nil {
				first = err
			}
		}
	}
	return n, first
}

// percentile of latencies (p in [0,1]).
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p * float64(len(s)-1))
	return s[i]
}

// The READONLY event frame of ../shared/dubbo-protocol.md with the 8 id bytes masked:
// da bb a2 00 <id:8> 00 00 00 02 01 52 (WRITEABLE ends in 57, "W").
var (
	readonlyPrefix  = []byte{0xda, 0xbb, 0xa2, 0x00}
	readonlySuffix  = []byte{0x00, 0x00, 0x00, 0x02, 0x01, 0x52}
	writeableSuffix = []byte{0x00, 0x00, 0x00, 0x02, 0x01, 0x57}
)

// isEventFrame reports whether raw is byte-identical to the READONLY ('R') or
// WRITEABLE ('W') frame, whatever its id.
func isEventFrame(raw []byte, ev byte) bool {
	suffix := readonlySuffix
	if ev == 'W' {
		suffix = writeableSuffix
	}
	return len(raw) == 18 && bytes.Equal(raw[:4], readonlyPrefix) && bytes.Equal(raw[12:], suffix)
}

// errLimit reports at most n errors of one kind, then counts the rest, so a broken
// run prints a readable failure instead of thousands of lines.
type errLimit struct {
	t    *testing.T
	n    int
	seen int
	what string
}

func newErrLimit(t *testing.T, n int, what string) *errLimit {
	return &errLimit{t: t, n: n, what: what}
}

func (e *errLimit) Errorf(format string, args ...any) {
	e.t.Helper()
	e.seen++
	if e.seen <= e.n {
		e.t.Errorf(format, args...)
	}
}

// Done reports how many errors were not printed.
func (e *errLimit) Done() {
	e.t.Helper()
	if e.seen > e.n {
		e.t.Errorf("... and %d more %s (%d in all)", e.seen-e.n, e.what, e.seen)
	}
}
