package triple

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
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
// waiting call, no budget, no consumer connection window (design §14.11: a request still arriving). A
// failure names the seed.
func TestH2ResendRandomRefusals(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	prov := newRandomRefuser(seed)
	p := startScriptedH2(t, prov.answer)
	p.head, p.partial = prov.head, prov.partial
	srv, addr := resendServer(t, p, proxy.Options{}, func(c *proxy.Config) { c.HTTP2.InitialWindowSize = 16 << 10 })

	const clients, calls = 4, 24
	rng := rand.New(rand.NewPCG(seed, 1))
	type call struct {
		tag      string
		body     []byte // the gRPC message, prefix included
		pieces   []int  // the body's pieces, in order
		pauses   []time.Duration
		client   int
		got, err string
	}
	all := make([]*call, clients*calls)
	for i := range all {
		n := 1 + rng.IntN(60<<10)
		c := &call{tag: fmt.Sprintf("call-%d", i), client: i % clients}
		c.body = grpcFrame(midBodyMsg(c.tag, n))
		for left := len(c.body); left > 0; {
			k := min(left, 1+rng.IntN(max(1, len(c.body)/2)))
			c.pieces = append(c.pieces, k)
			c.pauses = append(c.pauses, time.Duration(rng.IntN(3))*time.Millisecond)
			left -= k
		}
		all[i] = c
	}
	transports := make([]*http2.Transport, clients)
	for i := range transports {
		transports[i] = &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, a string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, a)
		}}
		defer transports[i].CloseIdleConnections()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() {
			pr, pw := io.Pipe()
			go func() {
				rest := c.body
				for i, k := range c.pieces {
					time.Sleep(c.pauses[i]) // interleaving, not waiting for anything
					if _, err := pw.Write(rest[:k]); err != nil {
						return
					}
					rest = rest[k:]
				}
				pw.Close()
			}()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/stormgate.Test/Echo", pr)
			if err != nil {
				c.err = err.Error()
				return
			}
			req.Header.Set("content-type", "application/grpc")
			req.Header.Set("te", "trailers")
			req.Header.Set(randomRefuserTag, c.tag)
			resp, err := transports[c.client].RoundTrip(req)
			if err != nil {
				c.err = err.Error()
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				c.err = err.Error()
			case resp.Trailer.Get("grpc-status") != "0":
				h := resp.Header // a trailers-only answer: Stormgate's own
				if h.Get("grpc-status") == "" {
					h = resp.Trailer
				}
				c.err = fmt.Sprintf(":status %d grpc-status %q (%q)", resp.StatusCode, h.Get("grpc-status"), h.Get("grpc-message"))
			case !bytes.Equal(b, grpcFrame(digest(c.body))):
				c.err = fmt.Sprintf("an answer of %d bytes that is not its own", len(b))
			}
		})
	}
	wg.Wait()
	refused := prov.result(t)
	for _, c := range all {
		if c.err != "" {
			t.Errorf("seed %d: %s (%d bytes in %d pieces, refused %d times): %s", seed, c.tag, len(c.body), len(c.pieces),
				prov.refusals(c.tag), c.err)
		}
		if n := prov.wholes(c.tag); n != 1 {
			t.Errorf("seed %d: %s reached the provider whole %d times, want 1", seed, c.tag, n)
		}
	}
	t.Logf("%d calls, %d refusals (%d before any body came)", len(all), refused, prov.atHead)
	if n := holdOutcome(t, srv, proxy.HoldReheldRefused); n != float64(refused) {
		t.Errorf("seed %d: %v calls sent again, want %d (one per refusal)", seed, n, refused)
	}
	waitNothingLeft(t, srv)
}

// randomRefuserTag is the request header naming a call for the randomRefuser across its resends.
const randomRefuserTag = "x-call"

// randomRefuser is the provider of TestH2ResendRandomRefusals: it refuses a third of the streams, each
// call at most twice, at a random point of its request, and counts what reaches it whole.
type randomRefuser struct {
	mu      sync.Mutex
	rng     *rand.Rand
	streams map[*scriptedConn]map[uint32]*refuserStream
	tries   map[string]int // refusals per call
	whole   map[string]int // whole requests per call
	atHead  int
	total   int
}

type refuserStream struct {
	tag   string
	after int // refuse once this many body bytes came (0: not refused)
}

func newRandomRefuser(seed uint64) *randomRefuser {
	return &randomRefuser{rng: rand.New(rand.NewPCG(seed, 2)), streams: map[*scriptedConn]map[uint32]*refuserStream{},
		tries: map[string]int{}, whole: map[string]int{}}
}

func (r *randomRefuser) head(pc *scriptedConn, id uint32, fields []h2.HeaderField) (forget bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &refuserStream{}
	for _, f := range fields {
		if f.Name == randomRefuserTag {
			s.tag = f.Value
		}
	}
	if r.streams[pc] == nil {
		r.streams[pc] = map[uint32]*refuserStream{}
	}
	r.streams[pc][id] = s
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
	s := r.streams[pc][id]
	if s == nil || s.after == 0 || len(body) < s.after {
		return false
	}
	r.refuseLocked(pc, id, s)
	return true
}

func (r *randomRefuser) refuseLocked(pc *scriptedConn, id uint32, s *refuserStream) {
	r.tries[s.tag]++
	r.total++
	delete(r.streams[pc], id)
	pc.reset(id, http2.ErrCodeRefusedStream)
}

func (r *randomRefuser) answer(pc *scriptedConn, id uint32, _ int, body []byte) {
	r.mu.Lock()
	s := r.streams[pc][id]
	delete(r.streams[pc], id)
	if s != nil {
		r.whole[s.tag]++
	}
	r.mu.Unlock()
	pc.answer(id, grpcFrame(digest(body)))
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
