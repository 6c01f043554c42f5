package triple

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2ConsumerSequences: on each of its streams a consumer may send what RFC 9113 allows in any
// interleaving with its other streams, and a provider may answer before a request has ended. Each round is
// a fresh consumer connection with streams of random kinds, their frames interleaved at random:
//
//	| kind      | the consumer sends                                         | it must get
//	|-----------|------------------------------------------------------------|------------------------------
//	| whole     | HEADERS (split in up to 9 frames), DATA(message, END)      | its message, grpc-status 0
//	| pieces    | HEADERS, the message in two DATA frames                    | its message, grpc-status 0
//	| emptyEnd  | HEADERS, DATA(message), DATA(empty, END_STREAM)            | its message, grpc-status 0
//	| padded    | HEADERS, DATA(part, padded), DATA(rest, padded, END)       | its message, grpc-status 0
//	| trailers  | HEADERS, DATA(message), trailers(END_STREAM)               | its message, grpc-status 0
//	| headEnd   | HEADERS(END_STREAM), no body                               | no message, grpc-status 0
//	| early     | HEADERS asking for NOT_FOUND, DATA, trailers (the provider | grpc-status 5, whenever its
//	|           | answers without reading)                                   | request parts come
//	| cancel    | HEADERS, part of the message, RST_STREAM CANCEL            | nothing (it ended the stream)
//
// and Stormgate must open at most one provider stream per head (no phantom call: the bug of
// TestH2TrailersAfterTheAnswerAreNoNewCall), run no call twice, and end with nothing left in its books,
// the hold queue, the budget or the consumers' connection windows. Two providers: one that takes every
// stream at once, and one that takes 2 at a time on Stormgate's one connection, so that most calls wait
// in the hold queue while their frames come (the adversarial run's version, which found the empty
// END_STREAM bug: TestH2AdvEmptyEndOverHoldBytes). A failure names the seed (logged) and the round; the
// kinds and the interleaving follow from them.
func TestH2ConsumerSequences(t *testing.T) {
	t.Run("free", func(t *testing.T) {
		prov := startGRPCProvider(t)
		srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
		consumerSequences(t, prov, srv, addr, 24, 8)
	})
	t.Run("two streams", func(t *testing.T) {
		prov := startGRPCProvider(t, grpc.MaxConcurrentStreams(2))
		srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) {
			c.UpstreamConns = 1
			c.HoldTimeout = 30 * time.Second
		})
		consumerSequences(t, prov, srv, addr, 12, 10)
		if n := prov.accepted.Load(); n != 1 {
			t.Errorf("the provider accepted %d connections, want 1 (a malformed frame ends grpc-go's connection)", n)
		}
	})
}

// consumerSequences runs TestH2ConsumerSequences's rounds against srv (at addr) and its provider prov.
func consumerSequences(t *testing.T, prov *grpcProvider, srv *proxy.Server, addr string, rounds, perRound int) {
	hp := poolOf(srv)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	heads := 0
	for round := range rounds {
		heads += seqRound(t, addr, rng, fmt.Sprintf("seed %d round %d", seed, round), perRound)
		if n, again := hp.opened.Load(), resends(t, srv); n > uint64(heads)+again {
			t.Fatalf("seed %d round %d: %d provider streams opened for %d request heads and %d sent again: a call the consumer never made",
				seed, round, n, heads, again)
		}
	}
	if n := prov.runTwice.Load(); n != 0 {
		t.Errorf("%d calls ran twice at the provider", n)
	}
	waitNothingLeft(t, srv)
}

// waitNothingLeft waits until srv keeps nothing of its HTTP/2 calls: no provider stream, no waiting or
// pausing call, no budget, none of its consumers' connection window.
func waitNothingLeft(t testing.TB, srv *proxy.Server) {
	t.Helper()
	hp := poolOf(srv)
	waitFor(t, 10*time.Second, "nothing left: no provider stream, no waiting call, no budget", func() bool {
		hp.mu.Lock()
		defer hp.mu.Unlock()
		return hp.streams == 0 && hp.prov.Hold().CallsWaiting() == 0 && hp.prov.Hold().PausedCalls() == 0 && envOf(srv).Budget().InUse() == 0
	})
	waitFor(t, 10*time.Second, "every consumer's connection window handed back", func() bool {
		return consumerConnHeld(srv) == 0
	})
}

// resends is how many calls srv has sent again after a provider stream that proved them not run (the
// hold outcomes reheld_*): each opens one more provider stream for the same request head.
func resends(t testing.TB, srv *proxy.Server) uint64 {
	t.Helper()
	var n float64
	for _, o := range []proxy.HoldOutcome{proxy.HoldReheld, proxy.HoldReheldUnseen, proxy.HoldReheldNotRun, proxy.HoldReheldRefused} {
		n += holdOutcome(t, srv, o)
	}
	return uint64(n)
}

// chooser is where a sequence's choices come from: a seeded generator (math/rand/v2's Rand), or a fuzzer's
// bytes (fuzzChooser).
type chooser interface{ IntN(n int) int }

// fuzzChooser takes its choices from a fuzzer's input, one byte each (two for n over 256); 0 once it is
// used up.
type fuzzChooser struct{ b []byte }

func (c *fuzzChooser) IntN(n int) int {
	v := 0
	for range 1 + btoi(n > 256) {
		if len(c.b) > 0 {
			v = v<<8 | int(c.b[0])
			c.b = c.b[1:]
		}
	}
	return v % n
}

// The stream kinds of TestH2ConsumerSequences (its table).
var seqKinds = []string{"whole", "pieces", "emptyEnd", "padded", "trailers", "headEnd", "early", "cancel"}

// seqRound is one round of TestH2ConsumerSequences: a fresh consumer connection with perRound streams of
// kinds ch chooses, their frames interleaved as ch says, and between them frames that change nothing a
// stream must get (seqNoise). tag names the round in failures and makes its calls' keys unique. It checks
// every stream's answer and returns how many request heads it sent.
func seqRound(t *testing.T, addr string, ch chooser, tag string, perRound int) (heads int) {
	t.Helper()
	_, fr := h2Handshake(t, addr)
	c := &seqConsumer{t: t, fr: fr, answers: map[uint32]*rawAnswer{}, ended: map[uint32]bool{}}
	type stream struct {
		id     uint32
		kind   string
		msg    []byte
		frames []func()
	}
	var streams []*stream
	for i := range perRound {
		s := &stream{id: uint32(2*i + 1), kind: seqKinds[ch.IntN(len(seqKinds))]}
		s.msg = fmt.Appendf(nil, "%s-s%d-%s-", tag, s.id, s.kind)
		s.msg = append(s.msg, bytes.Repeat([]byte{byte('a' + ch.IntN(26))}, 1+ch.IntN(3000))...)
		body := grpcFrame(s.msg)
		key := h2.HeaderField{Name: "x-key", Value: fmt.Sprintf("%s-%d", tag, s.id)}
		head := echoHead(key, h2.HeaderField{Name: "x-sleep-ms", Value: fmt.Sprint(ch.IntN(5))})
		if s.kind == "early" {
			head = echoHead(key, h2.HeaderField{Name: "x-status", Value: "5"})
		}
		trailers := []h2.HeaderField{{Name: "x-request-trailer", Value: s.kind}}
		cut := 1 + ch.IntN(len(body)-1)
		pieces := 1 + ch.IntN(9)
		s.frames = append(s.frames, func() { c.headersSplit(s.id, head, s.kind == "headEnd", pieces) })
		switch s.kind {
		case "whole":
			s.frames = append(s.frames, func() { c.data(s.id, body, true) })
		case "pieces":
			s.frames = append(s.frames, func() { c.data(s.id, body[:cut], false) }, func() { c.data(s.id, body[cut:], true) })
		case "emptyEnd":
			s.frames = append(s.frames, func() { c.data(s.id, body, false) }, func() { c.data(s.id, nil, true) })
		case "padded":
			pad1, pad2 := 1+ch.IntN(200), ch.IntN(200)
			s.frames = append(s.frames, func() { c.dataPadded(s.id, body[:cut], false, pad1) },
				func() { c.dataPadded(s.id, body[cut:], true, pad2) })
		case "trailers", "early":
			s.frames = append(s.frames, func() { c.data(s.id, body, false) }, func() { c.headers(s.id, trailers, true) })
		case "cancel":
			s.frames = append(s.frames, func() { c.data(s.id, body[:cut], false) }, func() { c.reset(s.id) })
		}
		s.frames = seqNoise(c, ch, s.id, uint32(2*perRound+1), s.frames)
		streams = append(streams, s)
		heads++
	}
	go c.read()
	// Frames in a random interleaving: each stream's own in order, and the heads in stream order
	// (stream ids must grow): streams[:next] have sent their heads, streams[next] may send its own.
	for next := 0; ; {
		var ready []int
		for i := range min(next+1, len(streams)) {
			if len(streams[i].frames) > 0 {
				ready = append(ready, i)
			}
		}
		if len(ready) == 0 {
			break
		}
		i := ready[ch.IntN(len(ready))]
		if i == next {
			next++
		}
		s := streams[i]
		s.frames[0]()
		s.frames = s.frames[1:]
	}
	// Stormgate handles a connection's frames in order: once it has answered this PING it has taken every
	// frame above, so a call it opens later is not this round's (a cancelled stream's head may come last).
	c.sync()
	var answered []uint32
	for _, s := range streams {
		if s.kind != "cancel" {
			answered = append(answered, s.id)
		}
	}
	c.waitEnded(answered)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range streams {
		a := c.answers[s.id]
		switch s.kind {
		case "cancel":
		case "early":
			if a == nil || a.grpcStatus != "5" {
				t.Errorf("%s stream %d (early): %+v, want grpc-status 5", tag, s.id, a)
			}
		case "headEnd":
			if a == nil || a.grpcStatus != "0" || len(a.body) != 0 {
				t.Errorf("%s stream %d (headEnd): %+v, want grpc-status 0 and no message", tag, s.id, a)
			}
		default:
			if a == nil || a.grpcStatus != "0" || !bytes.Equal(a.body, grpcFrame(s.msg)) {
				t.Errorf("%s stream %d (%s): %+v, want its own message and grpc-status 0", tag, s.id, s.kind, a)
			}
		}
	}
	return heads
}

// seqNoise puts up to three frames among a stream's own (after its head, never inside its header block)
// that RFC 9113 lets a consumer send and that change nothing the stream must get:
//
//	| noise             | where                                     | a receiver must
//	|-------------------|-------------------------------------------|---------------------------------------
//	| PING              | anywhere                                  | answer it (Stormgate itself)
//	| WINDOW_UPDATE(0)  | anywhere (small increments)               | add to the connection's send window
//	| WINDOW_UPDATE(id) | before the stream's last frame            | add to the stream's send window
//	| PRIORITY          | on this stream, or on one not opened yet  | ignore it (RFC 9113 §5.3.2); it opens
//	|                   | (beyond); any time                        | no stream, so lower ids may still open
//	| unknown type 0xfa | on this stream, any time                  | ignore it (§4.1, §5.5)
func seqNoise(c *seqConsumer, ch chooser, id, beyond uint32, frames []func()) []func() {
	for range ch.IntN(4) {
		var f func()
		last := len(frames) - 1 // noise goes before frames[at], at in [1, len]
		at := 1 + ch.IntN(len(frames))
		switch ch.IntN(5) {
		case 0:
			f = c.ping
		case 1:
			incr := uint32(1 + ch.IntN(1000))
			f = func() { c.windowUpdate(0, incr) }
		case 2:
			if last < 1 { // one frame: nothing comes before its end
				continue
			}
			at = 1 + ch.IntN(last)
			incr := uint32(1 + ch.IntN(1000))
			f = func() { c.windowUpdate(id, incr) }
		case 3:
			on := id
			if ch.IntN(2) == 1 {
				on = beyond + 2*uint32(ch.IntN(8))
			}
			f = func() { c.priority(on) }
		case 4:
			f = func() { c.unknown(id) }
		}
		frames = append(frames[:at], append([]func(){f}, frames[at:]...)...)
	}
	return frames
}

// FuzzH2ConsumerSequences is TestH2ConsumerSequences's round with every choice from the fuzzer's input:
// the kinds, sizes, splits, noise and interleaving of up to 10 streams on one consumer connection, against
// a provider that takes 2 streams at a time on Stormgate's one connection (most calls wait while their
// frames come). Each input must give every stream its own answer, open no call the consumer did not make,
// run none twice, and leave nothing kept. `make test` runs the seeds below; to search:
//
//	go test -run '^$' -fuzz FuzzH2ConsumerSequences -fuzztime 5m ./proxy
func FuzzH2ConsumerSequences(f *testing.F) {
	prov := startGRPCProvider(f, grpc.MaxConcurrentStreams(2))
	srv, addr := newH2ServerWith(f, prov.Addr().String(), proxy.ProtoTriple, proxy.Options{Logger: zap.NewNop()}, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.HoldTimeout = 30 * time.Second
	})
	hp := poolOf(srv)
	f.Add([]byte{})
	f.Add([]byte{9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add(bytes.Repeat([]byte{7, 200, 3, 41, 5}, 40))
	f.Add(bytes.Repeat([]byte{255, 128, 1}, 60))
	var n atomic.Int64 // rounds in this process: keys stay unique when the fuzzer repeats an input
	f.Fuzz(func(t *testing.T, data []byte) {
		ch := &fuzzChooser{b: data}
		before, againBefore := hp.opened.Load(), resends(t, srv)
		heads := seqRound(t, addr, ch, fmt.Sprintf("fuzz %d", n.Add(1)), 1+ch.IntN(10))
		if opened, again := hp.opened.Load()-before, resends(t, srv)-againBefore; opened > uint64(heads)+again {
			t.Fatalf("%d provider streams opened for %d request heads and %d sent again: a call the consumer never made",
				opened, heads, again)
		}
		if k := prov.runTwice.Load(); k != 0 {
			t.Fatalf("%d calls ran twice at the provider", k)
		}
		waitNothingLeft(t, srv)
	})
}

// consumerConnHeld is the request DATA Stormgate received and has not handed back to its HTTP/2
// consumers' connection windows, over all of them.
func consumerConnHeld(srv *proxy.Server) int64 {
	var held int64
	for _, h := range sessionsOf(srv) {
		h.mu.Lock()
		if !h.closed && h.conn != nil {
			held += h.conn.ConnHeld()
		}
		h.mu.Unlock()
	}
	return held
}

// TestH2WaitingCallsHandBackEachWindowOnce: calls that wait for the provider's one stream while their
// bodies come hand their consumer's connection window back on receipt, and only their stream's when the
// bytes leave (sent, or dropped by a cancel): once everything ended Stormgate holds none of the
// consumer's connection window, and it never handed back more than the consumer sent.
func TestH2WaitingCallsHandBackEachWindowOnce(t *testing.T) {
	prov := startGRPCProvider(t, grpc.MaxConcurrentStreams(1))
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.HoldTimeout = 30 * time.Second
	})
	hp := poolOf(srv)
	_, fr := h2Handshake(t, addr)
	c := &seqConsumer{t: t, fr: fr, answers: map[uint32]*rawAnswer{}, ended: map[uint32]bool{}}
	go c.read()
	const streams, chunk = 12, 15000 // 60,000 bytes a stream (its window is 65,535); 720,000 in all
	msgs := map[uint32][]byte{}
	var answered []uint32
	for i := range streams {
		id := uint32(2*i + 1)
		msgs[id] = grpcFrame(bytes.Repeat([]byte{byte('a' + i)}, 4*chunk-5))
		c.headers(id, echoHead(h2.HeaderField{Name: "x-sleep-ms", Value: "10"}), false)
		if i%4 != 3 {
			answered = append(answered, id)
		}
	}
	for off := 0; off < 4*chunk; off += chunk { // every stream's body a piece at a time, while most wait
		for i := range streams {
			id := uint32(2*i + 1)
			if i%4 == 3 && off == 2*chunk {
				c.reset(id) // cancelled while it waits (or is sent), half its body kept
				continue
			}
			if i%4 != 3 || off < 2*chunk {
				c.data(id, msgs[id][off:off+chunk], off+chunk == 4*chunk)
			}
		}
	}
	c.waitEnded(answered)
	c.mu.Lock()
	for _, id := range answered {
		if a := c.answers[id]; a == nil || a.grpcStatus != "0" || !bytes.Equal(a.body, msgs[id]) {
			t.Errorf("stream %d: %+v, want its own message and grpc-status 0", id, a)
		}
	}
	c.mu.Unlock()
	waitFor(t, 10*time.Second, "nothing left, every byte's connection window handed back", func() bool {
		hp.mu.Lock()
		done := hp.streams == 0 && hp.prov.Hold().CallsWaiting() == 0 && envOf(srv).Budget().InUse() == 0
		hp.mu.Unlock()
		return done && consumerConnHeld(srv) == 0
	})
	c.wmu.Lock()
	sent := c.sent
	c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	// Beyond its first 65,535 bytes the connection window Stormgate announced came as one WINDOW_UPDATE.
	var initial uint64
	for _, h := range sessionsOf(srv) {
		h.mu.Lock()
		if st, err := h.conn.Export(); err == nil {
			initial = uint64(st.ConnWin) - 65535
		}
		h.mu.Unlock()
	}
	if c.connIn > sent+initial {
		t.Fatalf("Stormgate handed back %d bytes of connection window for %d sent (and %d at the start)", c.connIn, sent, initial)
	}
}

// seqConsumer is an x/net consumer connection whose frames are written from two goroutines (the test's,
// and the reader's acknowledgements), so the framer's writes are serialized.
type seqConsumer struct {
	t       *testing.T
	fr      *http2.Framer
	wmu     sync.Mutex
	first   bool // the first header block was written (it carries the table size update)
	mu      sync.Mutex
	answers map[uint32]*rawAnswer
	ended   map[uint32]bool // streams Stormgate ended (END_STREAM or RST_STREAM)
	err     error
	sent    uint64 // DATA payload written, under wmu
	connIn  uint64 // connection WINDOW_UPDATE increments Stormgate sent, under mu
	synced  bool   // Stormgate answered sync's PING, under mu
}

func (c *seqConsumer) headers(id uint32, fields []h2.HeaderField, end bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	block := h2.AppendFields(nil, fields)
	if !c.first {
		c.first, block = true, firstBlock(fields)
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true, EndStream: end}); err != nil {
		c.t.Errorf("HEADERS on stream %d: %v", id, err)
	}
}

func (c *seqConsumer) data(id uint32, b []byte, end bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteData(id, end, b); err != nil {
		c.t.Errorf("DATA on stream %d: %v", id, err)
	}
	c.sent += uint64(len(b))
}

// sync sends a PING of its own and waits for Stormgate's answer.
func (c *seqConsumer) sync() {
	c.t.Helper()
	c.wmu.Lock()
	err := c.fr.WritePing(false, seqSyncPing)
	c.wmu.Unlock()
	if err != nil {
		c.t.Fatalf("PING: %v", err)
	}
	waitFor(c.t, 20*time.Second, "the answer to the round's last PING", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.synced
	})
}

// seqSyncPing is sync's PING payload.
var seqSyncPing = [8]byte{'s', 'e', 'q', '-', 's', 'y', 'n', 'c'}

func (c *seqConsumer) ping() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WritePing(false, [8]byte{'s', 'e', 'q'}); err != nil {
		c.t.Errorf("PING: %v", err)
	}
}

func (c *seqConsumer) windowUpdate(id, incr uint32) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteWindowUpdate(id, incr); err != nil {
		c.t.Errorf("WINDOW_UPDATE on stream %d: %v", id, err)
	}
}

func (c *seqConsumer) priority(id uint32) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WritePriority(id, http2.PriorityParam{Weight: 15}); err != nil {
		c.t.Errorf("PRIORITY on stream %d: %v", id, err)
	}
}

// unknown sends a frame of a type RFC 9113 does not define, which a receiver must ignore.
func (c *seqConsumer) unknown(id uint32) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteRawFrame(0xfa, 0, id, []byte("ignore me")); err != nil {
		c.t.Errorf("frame of type 0xfa on stream %d: %v", id, err)
	}
}

func (c *seqConsumer) reset(id uint32) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
		c.t.Errorf("RST_STREAM on stream %d: %v", id, err)
	}
}

// read reads frames until the connection ends, acknowledging PINGs and SETTINGS and recording answers.
func (c *seqConsumer) read() {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		get := func(id uint32) *rawAnswer {
			if c.answers[id] == nil {
				c.answers[id] = &rawAnswer{}
			}
			return c.answers[id]
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			a := get(f.StreamID)
			fs, derr := hpack.NewDecoder(0, nil).DecodeFull(f.HeaderBlockFragment()) // Stormgate's need no table
			if derr != nil {
				c.err = derr
			}
			for _, hf := range fs {
				switch hf.Name {
				case ":status":
					a.status = hf.Value
				case "grpc-status":
					a.grpcStatus = hf.Value
				}
			}
			if f.StreamEnded() {
				c.ended[f.StreamID] = true
			}
		case *http2.DataFrame:
			a := get(f.StreamID)
			a.body = append(a.body, f.Data()...)
			if f.StreamEnded() {
				c.ended[f.StreamID] = true
			}
			if n := len(f.Data()); n > 0 { // hand the window back at once: this consumer reads
				c.mu.Unlock()
				c.wmu.Lock()
				_ = c.fr.WriteWindowUpdate(0, uint32(n))
				_ = c.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				c.wmu.Unlock()
				c.mu.Lock()
			}
		case *http2.RSTStreamFrame:
			a := get(f.StreamID)
			a.wasReset, a.reset = true, f.ErrCode
			c.ended[f.StreamID] = true
		case *http2.PingFrame:
			if f.IsAck() && f.Data == seqSyncPing {
				c.synced = true
			}
			if !f.IsAck() {
				c.mu.Unlock()
				c.wmu.Lock()
				_ = c.fr.WritePing(true, f.Data)
				c.wmu.Unlock()
				c.mu.Lock()
			}
		case *http2.GoAwayFrame:
			c.err = fmt.Errorf("GOAWAY %v", f.ErrCode)
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.connIn += uint64(f.Increment)
			}
		}
		c.mu.Unlock()
	}
}

// waitEnded waits until Stormgate has ended each of the streams ids (END_STREAM or RST_STREAM).
func (c *seqConsumer) waitEnded(ids []uint32) {
	c.t.Helper()
	waitFor(c.t, 20*time.Second, fmt.Sprintf("%d streams answered", len(ids)), func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			c.t.Fatalf("consumer connection: %v", c.err)
		}
		for _, id := range ids {
			if !c.ended[id] {
				return false
			}
		}
		return true
	})
}

// headersSplit sends a header block in HEADERS and up to 8 CONTINUATION frames (pieces of about equal
// size).
func (c *seqConsumer) headersSplit(id uint32, fields []h2.HeaderField, end bool, pieces int) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	block := h2.AppendFields(nil, fields)
	if !c.first {
		c.first, block = true, firstBlock(fields)
	}
	pieces = max(1, min(pieces, 9, len(block)))
	size := (len(block) + pieces - 1) / pieces
	first := block[:size]
	rest := block[size:]
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndHeaders: len(rest) == 0, EndStream: end}); err != nil {
		c.t.Errorf("HEADERS on stream %d: %v", id, err)
	}
	for len(rest) > 0 {
		n := min(size, len(rest))
		if err := c.fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			c.t.Errorf("CONTINUATION on stream %d: %v", id, err)
		}
		rest = rest[n:]
	}
}

func (c *seqConsumer) dataPadded(id uint32, b []byte, end bool, pad int) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fr.WriteDataPadded(id, end, b, make([]byte, pad)); err != nil {
		c.t.Errorf("DATA on stream %d: %v", id, err)
	}
}
