package triple

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2ResendRandomRefusals: Go's own HTTP/2 client (x/net/http2, which keeps to every window) makes gRPC
// calls through Stormgate with bodies of 1 B to 60 KiB sent in random pieces at random moments, over
// consumer stream windows of 16 KiB; the provider refuses (REFUSED_STREAM) a third of the streams it
// sees, at a random point of the request (its head, or after some of its body), each call at most twice,
// and answers the rest with the digest of the whole request. Every call must get the digest of its own
// body, the provider must get each call whole exactly once, and nothing may be left: no stream, no
// waiting call, no budget, no consumer connection window (design §14.11: a request still arriving). In
// the second run the provider also shuts each connection down gracefully now and then (GOAWAY naming the
// last stream it saw, streams above it ignored, the connection closed once the rest are answered), and a
// tenth of the consumers give up on their call at a random moment: those may end either way, but never
// reach the provider twice. A failure names the seed.
func TestH2ResendRandomRefusals(t *testing.T) {
	t.Run("refusals", func(t *testing.T) { randomRefusals(t, false) })
	t.Run("refusals, GOAWAYs and consumers giving up", func(t *testing.T) { randomRefusals(t, true) })
}

func randomRefusals(t *testing.T, rough bool) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	prov := newRandomRefuser(seed, rough)
	p := startScriptedH2(t, prov.answer)
	p.head, p.partial = prov.head, prov.partial
	srv, addr := resendServer(t, p, proxy.Options{}, func(c *proxy.Config) { c.HTTP2.InitialWindowSize = 16 << 10 })

	const clients, calls = 4, 24
	rng := rand.New(rand.NewPCG(seed, 1))
	giveUp := 0
	if rough {
		giveUp = 10
	}
	all := make([]*netCall, clients*calls)
	for i := range all {
		all[i] = newNetCall(rng, fmt.Sprintf("call-%d", i), 1+rng.IntN(60<<10), i%clients, giveUp)
		all[i].header.Set(randomRefuserTag, all[i].tag)
	}
	runNetCalls(t, addr, dialNetConsumers(t, addr, clients), all)
	refused, above, gaveUp := prov.result(t), prov.aboveGoAway(), 0
	for _, c := range all {
		n, ok := prov.wholes(c.tag), c.answered(grpcFrame(digest(c.body)))
		switch {
		case c.giveUp > 0:
			gaveUp++
			if n > 1 || ok && n != 1 {
				t.Errorf("seed %d: %s, given up on (%s), reached the provider whole %d times", seed, c.tag, c.status, n)
			}
		case !ok:
			t.Errorf("seed %d: %s (%d bytes in %d pieces, refused %d times): %s with %d answer bytes, want its digest",
				seed, c.tag, len(c.body), len(c.pieces), prov.refusals(c.tag), c.status, len(c.answer))
		case n != 1:
			t.Errorf("seed %d: %s reached the provider whole %d times, want 1", seed, c.tag, n)
		}
	}
	t.Logf("%d calls (%d given up on), %d refusals (%d before any body came), %d streams above a GOAWAY, %d connections",
		len(all), gaveUp, refused, prov.atHead, above, p.conns.Load())
	// Each refusal and each stream above a GOAWAY sends its call again, unless its consumer gave up first.
	if n := holdOutcome(t, srv, proxy.HoldReheldRefused); n > float64(refused+above) || gaveUp == 0 && n != float64(refused+above) {
		t.Errorf("seed %d: %v calls sent again, want %d (one per refusal and stream above a GOAWAY)", seed, n, refused+above)
	}
	waitNothingLeft(t, srv)
}

// randomRefuserTag is the request header naming a call for the randomRefuser across its resends.
const randomRefuserTag = "x-call"

// randomRefuser is the provider of TestH2ResendRandomRefusals: it refuses a third of the streams, each
// call at most twice, at a random point of its request, and counts what reaches it whole. Rough, it also
// shuts a connection down gracefully after 10 to 40 heads: GOAWAY naming the last stream it saw, later
// streams ignored (RFC 9113 §6.8: not processed), the connection closed once the rest are answered.
type randomRefuser struct {
	mu     sync.Mutex
	rng    *rand.Rand
	rough  bool
	conns  map[*scriptedConn]*refuserConn
	tries  map[string]int // refusals per call
	whole  map[string]int // whole requests per call
	atHead int
	total  int
	above  int // heads ignored above a GOAWAY
}

type refuserConn struct {
	streams map[uint32]*refuserStream
	heads   int
	goAway  int    // heads after which it goes away (0: never)
	last    uint32 // its GOAWAY's last stream id, once sent
	away    bool
}

type refuserStream struct {
	tag   string
	after int // refuse once this many body bytes came (0: not refused)
}

func newRandomRefuser(seed uint64, rough bool) *randomRefuser {
	return &randomRefuser{rng: rand.New(rand.NewPCG(seed, 2)), rough: rough, conns: map[*scriptedConn]*refuserConn{},
		tries: map[string]int{}, whole: map[string]int{}}
}

func (r *randomRefuser) head(pc *scriptedConn, id uint32, fields []h2.HeaderField) (forget bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.conns[pc]
	if rc == nil {
		rc = &refuserConn{streams: map[uint32]*refuserStream{}}
		if r.rough {
			rc.goAway = 10 + r.rng.IntN(31)
		}
		r.conns[pc] = rc
	}
	if rc.away {
		r.above++ // never processed: Stormgate sends it again on another connection
		return true
	}
	s := &refuserStream{}
	for _, f := range fields {
		if f.Name == randomRefuserTag {
			s.tag = f.Value
		}
	}
	rc.streams[id] = s
	if rc.heads++; rc.heads == rc.goAway {
		rc.away, rc.last = true, id
		pc.goAway(id)
	}
	if r.tries[s.tag] >= 2 || r.rng.IntN(3) != 0 {
		return false
	}
	if r.rng.IntN(3) == 0 { // at the head
		r.refuseLocked(pc, id, s)
		r.atHead++
		return true
	}
	s.after = 1 + r.rng.IntN(32<<10)
	return false
}

func (r *randomRefuser) partial(pc *scriptedConn, id uint32, body []byte) (forget bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.conns[pc].streams[id]
	if s == nil || s.after == 0 || len(body) < s.after {
		return false
	}
	r.refuseLocked(pc, id, s)
	return true
}

func (r *randomRefuser) refuseLocked(pc *scriptedConn, id uint32, s *refuserStream) {
	r.tries[s.tag]++
	r.total++
	pc.reset(id, http2.ErrCodeRefusedStream)
	r.doneLocked(pc, id)
}

// doneLocked forgets stream id; a connection gone away shuts its side once its last stream is done, and
// reads on until Stormgate closes (a close with unread bytes would reset the connection, and the kernel
// could drop the answers in flight with it).
func (r *randomRefuser) doneLocked(pc *scriptedConn, id uint32) {
	rc := r.conns[pc]
	delete(rc.streams, id)
	if rc.away && len(rc.streams) == 0 {
		_ = pc.nc.(*net.TCPConn).CloseWrite()
	}
}

func (r *randomRefuser) answer(pc *scriptedConn, id uint32, _ int, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.conns[pc].streams[id]
	if s == nil {
		return // a stream it refused or ignored, ended by Stormgate's END_STREAM in flight
	}
	r.whole[s.tag]++
	pc.answer(id, grpcFrame(digest(body)))
	r.doneLocked(pc, id)
}

func (r *randomRefuser) aboveGoAway() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.above
}

func (r *randomRefuser) refusals(tag string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tries[tag]
}

func (r *randomRefuser) wholes(tag string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.whole[tag]
}

// result is how many streams it refused; the test fails if it never refused one after some body came
// (the case under test), which a seed with 96 calls makes unlikely (about (7/9)^64).
func (r *randomRefuser) result(t *testing.T) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.total-r.atHead == 0 {
		t.Errorf("no stream was refused after some of its body came: the test did not test its case")
	}
	return r.total
}
