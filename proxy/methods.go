package proxy

import (
	"github.com/stormgate/stormgate/proxy/wire"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Per-method RED metrics: every two-way request is identified once, on arrival, as an
// index into one table of the service/method pairs seen (callTable), and that index
// travels with the request (callRef). Its answer is counted under that index by status,
// with its duration, in memory the answering goroutine owns (a callShard):
//
//	| who answers                          | shard                         | writers
//	|--------------------------------------|-------------------------------|---------------------------
//	| the provider (upConn.route, answer)  | the provider connection's own | its netpoll handler
//	| Stormgate (refuse, replyError)       | the server's local shard      | any goroutine (error paths)
//	| anyone, an HTTP/2 call (proxy/triple/calls.go)  | its h2 pool's (h2Pool.calls)  | the pool's goroutines
//
// so a forwarded Dubbo request's counts touch no cache line that another core writes, as
// counters.go explains for the unlabelled counts. (An HTTP/2 call's frames already take
// its pool's one mutex, a line every core of the pool writes: a shard per provider
// connection would save nothing there, and would need a fold for answers that end after
// their connection, which HTTP/2's flow control allows.) There are only M provider
// connections (not 10,000 consumer connections) and pages are allocated as pairs are
// seen, so the memory is M+2 shards (and one per h2 pool) of about 400 bytes per pair
// seen. Held and re-held requests and local replies by reason are rarer events and count
// in the server's shared callEvents.
// A scrape sums the shards; a provider connection's shard joins the closed totals when it
// ends (upClosed.fold), under the lock the scrape takes.
//
// The table is copy-on-write: the hot path looks the request's names up in an immutable
// map behind an atomic pointer (no lock, no allocation: the key is built on the stack);
// only a pair not seen before takes the mutex and copies the map. It is bounded by
// metrics.max_methods: once full, new pairs count under "other", decided without a lock.
// Pairs are never forgotten while the process runs (a series does not vanish and come
// back); a lower bound applies to pairs seen afterwards.

// maxMethodsLimit is the largest metrics.max_methods.
const maxMethodsLimit = 10000

// maxNameLen bounds each name of a CallName; a codec reports longer ones as not identified.
const maxNameLen = 255

// Reserved call indexes.
const (
	MethodUnknown = 0 // not identified: another serialization, a malformed body, per-method metrics off
	callOther     = 1 // the table was full
	firstCall     = 2
)

const (
	callPageSize = 64
	maxCallPages = (maxMethodsLimit + firstCall + callPageSize - 1) / callPageSize
	maxStatuses  = 32 // statusVocab.names, at most (a power of two: an index is masked)
)

// callRef is what a request carries for per-method metrics and the access log.
type callRef struct {
	method uint32 // index into the call table; MethodUnknown when not identified
	size   uint32 // the request frame's bytes
	hold   uint8  // callHeld, callReheld
}

const (
	callHeld   uint8 = 1 << iota // it waited in the hold queue
	callReheld                   // it went back to the hold queue after being sent
)

// methodBounds are stormgate_method_request_duration_seconds' buckets: RPC latencies from
// half a millisecond to the longest a consumer waits (Java's timeouts are 1-60 s).
var methodBounds = [...]float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

const nMethodBuckets = len(methodBounds) + 1

// callCount is one pair's counts in one shard.
type callCount struct {
	status     [maxStatuses]atomic.Uint64
	exceptions atomic.Uint64
	buckets    [nMethodBuckets]atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sumNs      atomic.Uint64
}

func (c *callCount) observe(status int, exception bool, d time.Duration) {
	c.status[status&(maxStatuses-1)].Add(1)
	if exception {
		c.exceptions.Add(1)
	}
	c.buckets[bucketOf(methodBounds[:], d)].Add(1)
	c.sumNs.Add(uint64(max(d, 0)))
}

// callEvent is one pair's rarer events, counted in the server's shared callEvents.
type callEvent struct {
	local  [nReplyReasons]atomic.Uint64 // Stormgate's own replies, by reason
	held   atomic.Uint64
	reheld atomic.Uint64
}

// paged holds one T per call index, allocated a page of 64 at a time as indexes are
// first used. at and peek are safe for concurrent use.
type paged[T any] struct {
	pages [maxCallPages]atomic.Pointer[[callPageSize]T]
}

// at returns index i's T, allocating its page the first time.
func (p *paged[T]) at(i uint32) *T {
	pi := i / callPageSize
	if pi >= maxCallPages {
		pi, i = 0, callOther
	}
	pg := p.pages[pi].Load()
	if pg == nil {
		p.pages[pi].CompareAndSwap(nil, new([callPageSize]T))
		pg = p.pages[pi].Load()
	}
	return &pg[i%callPageSize]
}

// peek returns index i's T, or nil while its page does not exist.
func (p *paged[T]) peek(i uint32) *T {
	if pg := p.pages[i/callPageSize].Load(); pg != nil {
		return &pg[i%callPageSize]
	}
	return nil
}

// MethodShard is the counts of one writer: a provider connection, or the server's local
// replies.
type MethodShard struct{ paged[callCount] }

// callTotal is a plain sum of callCounts (a scrape, or the shards of connections that
// ended).
type callTotal struct {
	status     [maxStatuses]uint64
	exceptions uint64
	buckets    [nMethodBuckets]uint64
	sumNs      uint64
}

func (t *callTotal) add(c *callCount) {
	for i := range t.status {
		t.status[i] += c.status[i].Load()
	}
	t.exceptions += c.exceptions.Load()
	for i := range t.buckets {
		t.buckets[i] += c.buckets[i].Load()
	}
	t.sumNs += c.sumNs.Load()
}

func (t *callTotal) addTotal(o *callTotal) {
	for i := range t.status {
		t.status[i] += o.status[i]
	}
	t.exceptions += o.exceptions
	for i := range t.buckets {
		t.buckets[i] += o.buckets[i]
	}
	t.sumNs += o.sumNs
}

func (t *callTotal) requests() (n uint64) {
	for _, v := range t.status {
		n += v
	}
	return n
}

// addShard adds every count of sh to totals, indexed by call, growing it as needed.
func addShard(totals []callTotal, sh *MethodShard) []callTotal {
	for pi := range sh.pages {
		pg := sh.pages[pi].Load()
		if pg == nil {
			continue
		}
		for j := range pg {
			i := pi*callPageSize + j
			for len(totals) <= i {
				totals = append(totals, callTotal{})
			}
			totals[i].add(&pg[j])
		}
	}
	return totals
}

// callLabels are a pair's label values.
type callLabels struct{ service, method string }

// callTable interns the pairs seen. See the top of this file.
type callTable struct {
	byKey atomic.Pointer[map[string]uint32] // names as read -> index; replaced, never changed
	full  atomic.Bool                       // no new pair fits under the bound
	limit atomic.Int32

	mu      sync.Mutex
	labels  []callLabels // by index; append only
	byLabel map[callLabels]uint32
}

func (t *callTable) init(limit int) {
	m := map[string]uint32{}
	t.byKey.Store(&m)
	t.labels = []callLabels{MethodUnknown: {"unknown", "unknown"}, callOther: {"other", "other"}}
	t.byLabel = map[callLabels]uint32{}
	t.setLimit(limit)
}

// setLimit applies metrics.max_methods.
func (t *callTable) setLimit(limit int) {
	t.mu.Lock()
	t.limit.Store(int32(limit))
	t.full.Store(len(t.labels)-firstCall >= limit)
	t.mu.Unlock()
}

// keyBuf is the stack buffer keys are built in; a longer key (names over about 250
// bytes in all) is built in a pooled buffer, so no lookup allocates.
const keyBuf = 256

var longKeys = sync.Pool{New: func() any { return new([4*maxNameLen + 3]byte) }}

// index returns c's index: the pair's, callOther when the table is full, or
// MethodUnknown when a name is too long. It does not allocate unless the pair is new.
func (t *callTable) index(c *wire.CallName) uint32 { return indexNames(t, names[[]byte](*c)) }

// names are a call's four names, as bytes of a Dubbo request or strings of a decoded
// HTTP/2 head: the same names intern to the same index, whichever protocol called.
type names[T ~string | ~[]byte] struct{ Service, Version, Group, Method T }

func indexNames[T ~string | ~[]byte](t *callTable, c names[T]) uint32 {
	if len(c.Service) > maxNameLen || len(c.Version) > maxNameLen || len(c.Group) > maxNameLen || len(c.Method) > maxNameLen {
		return MethodUnknown
	}
	if len(c.Service)+len(c.Version)+len(c.Group)+len(c.Method)+3 > keyBuf {
		buf := longKeys.Get().(*[4*maxNameLen + 3]byte)
		defer longKeys.Put(buf)
		return lookup(t, appendKey(buf[:0], c), c)
	}
	var buf [keyBuf]byte
	return lookup(t, appendKey(buf[:0], c), c)
}

// appendKey appends the four names, separated by zero bytes (which no name holds).
func appendKey[T ~string | ~[]byte](dst []byte, c names[T]) []byte {
	dst = append(append(dst, c.Service...), 0)
	dst = append(append(dst, c.Version...), 0)
	dst = append(append(dst, c.Group...), 0)
	return append(dst, c.Method...)
}

func lookup[T ~string | ~[]byte](t *callTable, key []byte, c names[T]) uint32 {
	if i, ok := (*t.byKey.Load())[string(key)]; ok {
		return i
	}
	if t.full.Load() {
		return callOther
	}
	return t.add(key, serviceKey(string(c.Group), string(c.Service), string(c.Version)), string(c.Method))
}

// add enters a pair not seen before (the slow path), with its label values.
func (t *callTable) add(key []byte, service, method string) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := *t.byKey.Load()
	if i, ok := m[string(key)]; ok {
		return i
	}
	lbl := callLabels{service: service, method: method}
	i, ok := t.byLabel[lbl]
	if !ok {
		if len(t.labels)-firstCall >= int(t.limit.Load()) {
			t.full.Store(true)
			return callOther
		}
		i = uint32(len(t.labels))
		t.labels = append(t.labels, lbl)
		t.byLabel[lbl] = i
		t.full.Store(len(t.labels)-firstCall >= int(t.limit.Load()))
	}
	if len(m) < 2*maxMethodsLimit { // other spellings of known pairs: bounded too
		next := make(map[string]uint32, len(m)+1)
		for k, v := range m {
			next[k] = v
		}
		next[string(key)] = i
		t.byKey.Store(&next)
	}
	return i
}

// snapshot returns the label values of every index so far.
func (t *callTable) snapshot() []callLabels {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.labels[:len(t.labels):len(t.labels)]
}

// label returns the label values of index i.
func (t *callTable) label(i uint32) callLabels {
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(i) < len(t.labels) {
		return t.labels[i]
	}
	return t.labels[MethodUnknown]
}

// serviceKey is Dubbo's own name of a service: group/interface:version, each part
// only when present (URL.getServiceKey, dubbo-go's common.ServiceKey).
func serviceKey(group, service, version string) string {
	var b strings.Builder
	b.Grow(len(group) + len(service) + len(version) + 2)
	if group != "" {
		b.WriteString(group)
		b.WriteByte('/')
	}
	b.WriteString(service)
	if version != "" {
		b.WriteByte(':')
		b.WriteString(version)
	}
	return b.String()
}

// callMetrics is the server's per-method state.
type callMetrics struct {
	table  callTable
	local  MethodShard      // Stormgate's own replies
	events paged[callEvent] // holds and local replies by reason
	access accessLog
}

// identify reads what a request frame calls (per-method metrics on), for the request
// to carry.
func (s *Server) identify(frame []byte, cfg *Config) callRef {
	ref := callRef{size: uint32(len(frame))}
	if cfg.MaxMethods == 0 {
		return ref
	}
	if c, ok := s.codec.Call(frame); ok {
		ref.method = s.calls.table.index(&c)
	}
	return ref
}

// noteHeld counts a request entering the hold queue (again, when reheld) and marks it.
func (s *Server) noteHeld(ref callRef, reheld bool) callRef {
	if s.cfg.Load().MaxMethods > 0 {
		ev := s.calls.events.at(ref.method)
		if reheld {
			ev.reheld.Add(1)
		} else {
			ev.held.Add(1)
		}
	}
	if reheld {
		ref.hold |= callReheld
	} else {
		ref.hold |= callHeld
	}
	return ref
}

// callAnswered counts the provider's answer resp to r (on r's provider connection's
// shard) and offers it to the access log; before the consumer can see it.
func (s *Server) callAnswered(r *request, resp []byte, now int64, sh *MethodShard) {
	cfg := s.cfg.Load()
	if cfg.MaxMethods == 0 && !cfg.AccessLog.Enabled {
		return
	}
	status, exc := s.codec.Outcome(resp)
	s.callEnded(cfg, sh, r.sess, r.call, status, exc, NoLocalReply, time.Duration(now-r.arrived), len(resp))
}

// Who ended a call, beside Stormgate's reasons (replyReason): for callEnded and the
// access log's answered_by.
const (
	NoLocalReply  ReplyReason = nReplyReasons     // the provider answered
	ConsumerEnded ReplyReason = nReplyReasons + 1 // its consumer ended it (HTTP/2: RST_STREAM, or gone)
)

// callReplied counts Stormgate's own reply to a request (on the server's local shard)
// and offers it to the access log; before the consumer can see it.
func (s *Server) callReplied(sess *session, call callRef, arrived int64, why wire.Failure, reason ReplyReason, reply []byte) {
	cfg := s.cfg.Load()
	if cfg.MaxMethods == 0 && !cfg.AccessLog.Enabled {
		return
	}
	s.callEnded(cfg, &s.calls.local, sess, call, s.codec.FailureStatus(why), false, reason,
		time.Duration(s.now()-arrived), len(reply))
}

// callEnded counts a call's end on shard sh: its status (an index into statusVocab.names),
// whether it carries a business exception, who ended it (local: a replyReason when
// Stormgate answered, else NoLocalReply or ConsumerEnded), its duration and the answer's
// bytes; and offers it to the access log. Any protocol, any goroutine.
func (s *Server) callEnded(cfg *Config, sh *MethodShard, sess *session, call callRef, status int, exc bool,
	local ReplyReason, d time.Duration, respBytes int) {
	if cfg.MaxMethods > 0 {
		sh.at(call.method).observe(status, exc, d)
		if local < nReplyReasons {
			s.calls.events.at(call.method).local[local].Add(1)
		}
	}
	if cfg.AccessLog.Enabled {
		s.calls.access.offer(s, cfg, sess, call, status, exc, local, d, respBytes)
	}
}
