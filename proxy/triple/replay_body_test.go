package triple

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/proxytest"
)

// A call refused while the rest of its body is still on its way from the consumer is sent again, its
// body so far first and the rest behind it as it comes (design §14.11). It used to end with grpc-status 14.

// midBodyMsg is a unique gRPC message of n bytes: no 4-byte window of it repeats, so a byte out of place shows.
func midBodyMsg(tag string, n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s-%07d.", tag, i)
	}
	return b.Bytes()[:n]
}

// digest is what refusedMidBody answers a request body with: the body, checked whole, in 32 bytes.
func digest(body []byte) []byte {
	d := sha256.Sum256(body)
	return d[:]
}

// windowedSender writes one stream's request DATA within the stream window Stormgate gives the consumer
// (http2.initial_window_size and its WINDOW_UPDATEs), reading frames while the window is shut: other
// streams' answers go to others (ended counts them), and nothing may come on its own stream before the
// request is whole.
type windowedSender struct {
	t      *testing.T
	fr     *http2.Framer
	id     uint32
	win    int
	others map[uint32]*rawAnswer
	ended  int
}

func (s *windowedSender) send(b []byte, end bool) {
	s.t.Helper()
	for len(b) > 0 || end {
		for s.win == 0 && len(b) > 0 {
			f, err := s.fr.ReadFrame()
			if err != nil {
				s.t.Fatalf("waiting for the stream window: %v", err)
			}
			switch f := f.(type) {
			case *http2.WindowUpdateFrame:
				if f.StreamID == s.id {
					s.win += int(f.Increment)
				}
			case *http2.SettingsFrame, *http2.PingFrame:
			default:
				if f.Header().StreamID == s.id {
					s.t.Fatalf("%v on stream %d before the request was whole: the call ended early", f.Header().Type, s.id)
				}
				if s.others == nil {
					s.others = map[uint32]*rawAnswer{}
				}
				if noteAnswer(s.t, s.others, f) {
					s.ended++
				}
			}
		}
		n := min(len(b), s.win, 16<<10)
		if err := s.fr.WriteData(s.id, end && n == len(b), b[:n]); err != nil {
			s.t.Fatal(err)
		}
		s.win -= n
		if b = b[n:]; len(b) == 0 && end {
			return
		}
	}
}

// refusedMidBody is a scripted provider that refuses (REFUSED_STREAM) the first stream it sees once some
// of its body came (refuseNow), or when the test says (refuse), and answers every whole request the test
// does not hold with the request's digest; seen counts the body bytes each later stream brought so far.
type refusedMidBody struct {
	*scriptedH2
	mu        sync.Mutex
	first     *scriptedConn // the connection of the stream it refuses
	firstID   uint32
	firstSeen int
	seen      map[uint32]int
	hold      func(pc *scriptedConn, id uint32, body []byte) bool // true: not answered now
}

func startRefusedMidBody(t *testing.T, refuseNow bool, streams uint32) *refusedMidBody {
	p := &refusedMidBody{seen: map[uint32]int{}}
	p.scriptedH2 = startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) {
		if p.hold != nil && p.hold(pc, id, body) {
			return
		}
		pc.answer(id, grpcFrame(digest(body)))
	})
	p.streams = streams
	p.partial = func(pc *scriptedConn, id uint32, body []byte) bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.first == nil || p.firstID == id {
			p.first, p.firstID, p.firstSeen = pc, id, len(body)
			if refuseNow {
				pc.reset(id, http2.ErrCodeRefusedStream)
				return true
			}
			return false
		}
		p.seen[id] = len(body)
		return false
	}
	return p
}

// firstBytes is how many body bytes the stream it refuses brought.
func (p *refusedMidBody) firstBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.firstSeen
}

// refuse refuses the first stream now (nothing more may come on it: the test waits for all of its bytes).
func (p *refusedMidBody) refuse() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.first.reset(p.firstID, http2.ErrCodeRefusedStream)
}

// resentBytes is how many body bytes the provider saw on streams after the refused one.
func (p *refusedMidBody) resentBytes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range p.seen {
		n += v
	}
	return n
}

// midBodyCall is one consumer's call through a Server in front of a refusedMidBody: its head and the first
// part of its body sent.
type midBodyCall struct {
	srv  *proxy.Server
	hp   *h2Pool
	fr   *http2.Framer
	body []byte
	s    *windowedSender
}

// startMidBodyCall starts a Server whose consumers get a window of window bytes in front of p, and a call
// of 40 KiB through it, sending first bytes of its body.
func startMidBodyCall(t *testing.T, p *refusedMidBody, tag string, window, first int) *midBodyCall {
	t.Helper()
	srv, addr := resendServer(t, p.scriptedH2, proxy.Options{}, func(c *proxy.Config) { c.HTTP2.InitialWindowSize = window })
	_, fr := h2Handshake(t, addr)
	c := &midBodyCall{srv: srv, hp: poolOf(srv), fr: fr, body: grpcFrame(midBodyMsg(tag, 40<<10))}
	writeHead(t, fr, 1, true)
	c.s = &windowedSender{t: t, fr: fr, id: 1, win: window}
	c.s.send(c.body[:first], false)
	return c
}

// waitingIn is how many request bytes the calls waiting for a provider stream hold.
func (c *midBodyCall) waitingIn() int {
	c.hp.mu.Lock()
	defer c.hp.unlock()
	n := 0
	c.hp.prov.Hold().EachCall(func(w proxy.Waiting) { n += len(w.(*h2Call).in) })
	return n
}

// wantAnswered wants a to be the provider's answer to the whole call, requests whole requests at the
// provider, the call sent again once, and every kept byte released.
func (c *midBodyCall) wantAnswered(t *testing.T, p *refusedMidBody, a *rawAnswer, requests int64) {
	t.Helper()
	if !a.echoed(digest(c.body)) {
		t.Errorf("the consumer got %v, want its own answer", a)
	}
	if n := p.requests.Load(); n != requests {
		t.Errorf("the provider got %d whole requests, want %d", n, requests)
	}
	wantReheld(t, c.srv, proxy.HoldReheldRefused, 1)
}

// TestH2ResendRefusedMidBody: the provider refuses a call after the first part of its body. Stormgate
// sends the head and that part again on a fresh stream, and the rest of the body follows as the consumer
// sends it: on the new stream, or while the call waits for one. The consumer's windows keep flowing (its
// stream window is smaller than the body), the provider gets the whole request byte for byte exactly
// once, and every byte kept for the resend is released. Failed before: the consumer got grpc-status 14.
func TestH2ResendRefusedMidBody(t *testing.T) {
	const window, first = 16 << 10, 10 << 10

	t.Run("the rest after the call went out again", func(t *testing.T) {
		p := startRefusedMidBody(t, true, 0)
		c := startMidBodyCall(t, p, "after", window, first)
		waitFor(t, 10*time.Second, "the call's first part sent again", func() bool { return p.resentBytes() == first })
		c.s.send(c.body[first:], true)
		c.wantAnswered(t, p, readAnswers(t, c.fr, 1)[1], 1)
	})

	t.Run("the rest while the call waits", func(t *testing.T) {
		// One stream at a time: the refused call waits behind another until the test answers that one.
		p := startRefusedMidBody(t, false, 1)
		type held struct {
			pc *scriptedConn
			id uint32
		}
		blocker := make(chan held, 1)
		blockerMsg := []byte("the call that keeps the only stream")
		p.hold = func(pc *scriptedConn, id uint32, body []byte) bool {
			if bytes.Equal(body, grpcFrame(blockerMsg)) {
				blocker <- held{pc, id}
				return true
			}
			return false
		}
		c := startMidBodyCall(t, p, "waits", window, first)
		waitFor(t, 10*time.Second, "the call's first part at the provider", func() bool { return p.firstBytes() == first })
		writeCall(t, c.fr, 3, false, blockerMsg)
		waitFor(t, 10*time.Second, "the second call waiting for the only stream", func() bool {
			return c.hp.prov.Hold().CallsWaiting() == 1
		})
		// The refusal frees the stream for the waiting call; the refused one waits behind it.
		p.refuse()
		var b held
		select {
		case b = <-blocker:
		case <-time.After(10 * time.Second):
			t.Fatal("the call that waited never reached the provider")
		}
		waitFor(t, 10*time.Second, "the refused call waiting again", func() bool {
			return holdOutcome(t, c.srv, proxy.HoldReheldRefused) == 1 && c.hp.prov.Hold().CallsWaiting() == 1
		})
		// While it waits the consumer may send one stream window (its first part's window came back when
		// that part first left); the rest once the call is on a stream again.
		waiting := first + window
		c.s.send(c.body[first:waiting], false)
		waitFor(t, 10*time.Second, "what the consumer sent while the call waits kept", func() bool { return c.waitingIn() == waiting })
		b.pc.answer(b.id, grpcFrame(digest(grpcFrame(blockerMsg))))
		c.s.send(c.body[waiting:], true)
		if c.s.others == nil {
			c.s.others = map[uint32]*rawAnswer{}
		}
		got := readMoreAnswers(t, c.fr, 2-c.s.ended, c.s.others)
		if a := got[3]; !a.echoed(digest(grpcFrame(blockerMsg))) {
			t.Errorf("the other call: %v", a)
		}
		c.wantAnswered(t, p, got[1], 2)
	})

	t.Run("the rest while the provider is away", func(t *testing.T) {
		// The provider goes away as it refuses the call (GOAWAY naming no stream, then its end), so the call
		// waits for its return; what the consumer sends meanwhile joins it. An upgrade's snapshot takes the
		// call while it carries only its request so far, and not once more of it came (the snapshot cannot
		// tell those bytes' windows apart).
		p := startRefusedMidBody(t, false, 0)
		c := startMidBodyCall(t, p, "away", window, first)
		waitFor(t, 10*time.Second, "the call's first part at the provider", func() bool { return p.firstBytes() == first })
		provAddr := p.addr()
		p.ln.Close()
		p.mu.Lock()
		pc := p.first
		p.mu.Unlock()
		pc.goAway(0)
		pc.nc.Close()
		waitFor(t, 10*time.Second, "the refused call waiting for the provider", func() bool {
			return holdOutcome(t, c.srv, proxy.HoldReheldRefused) == 1 && c.hp.prov.Hold().CallsWaiting() == 1
		})
		// A freeze, as an upgrade makes it, then a thaw, as a failed exec does.
		snap := func() (*proxy.H2SessionSnapshot, error) {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			sn, err := c.srv.Freeze(ctx)
			if err != nil {
				return nil, err
			}
			defer c.srv.Thaw()
			if len(sn.Sessions) != 1 || sn.Sessions[0].H2 == nil {
				t.Fatalf("the snapshot: %s, want one HTTP/2 consumer", proxytest.SnapshotSummary(sn))
			}
			return sn.Sessions[0].H2, nil
		}
		hs, err := snap()
		if err != nil {
			t.Fatalf("the freeze with the one call waiting with its request so far: %v", err)
		}
		if w := hs.Calls; len(w) != 1 || !w[0].Resending || !bytes.Equal(w[0].In, c.body[:first]) || w[0].InEnd {
			t.Errorf("the waiting call's snapshot: %+v, want Resending with the first %d bytes", w, first)
		}
		more := first + window
		c.s.send(c.body[first:more], false)
		waitFor(t, 10*time.Second, "what the consumer sent while the call waits kept", func() bool { return c.waitingIn() == more })
		if _, err := snap(); !errors.Is(err, proxy.ErrNotAtRest) || !strings.Contains(err.Error(), "the rest of its body") {
			t.Errorf("the freeze with more of the body come: %v, want %v saying why", err, proxy.ErrNotAtRest)
		}
		ln, err := net.Listen("tcp", provAddr)
		if err != nil {
			t.Fatal(err)
		}
		p.accept(t, ln)
		c.s.send(c.body[more:], true)
		c.wantAnswered(t, p, readAnswers(t, c.fr, 1)[1], 1)
	})
}
