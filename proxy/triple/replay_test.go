package triple

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/stormgate/stormgate/keepalive"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// scriptedH2 is an h2c provider whose every answer a test decides: each whole request (head and DATA to
// END_STREAM) goes to handle with the connection it came on and its index among all requests.
type scriptedH2 struct {
	ln       net.Listener
	handle   func(pc *scriptedConn, id uint32, n int, body []byte)
	requests atomic.Int64
	conns    atomic.Int64
	stalled  chan *scriptedConn // when set, the first connection goes here after SETTINGS and is never read
	streams  uint32             // when set, its SETTINGS_MAX_CONCURRENT_STREAMS
	// head and partial, when set, see each request head, and each request DATA that does not end its
	// stream with the body so far; true forgets the stream (the hook reset it): what comes on it later is
	// ignored.
	head    func(pc *scriptedConn, id uint32, fields []h2.HeaderField) (forget bool)
	partial func(pc *scriptedConn, id uint32, body []byte) (forget bool)
}

// scriptedConn is one connection to a scriptedH2; its methods answer a stream.
type scriptedConn struct {
	nc    net.Conn
	index int // 0 for the first connection accepted
	mu    sync.Mutex
	fr    *http2.Framer
	hbuf  bytes.Buffer
	enc   *hpack.Encoder
}

func startScriptedH2(t *testing.T, handle func(pc *scriptedConn, id uint32, n int, body []byte)) *scriptedH2 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &scriptedH2{handle: handle}
	p.accept(t, ln)
	return p
}

// accept serves the connections ln accepts until it is closed.
func (p *scriptedH2) accept(t *testing.T, ln net.Listener) {
	p.ln = ln
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			pc := &scriptedConn{nc: nc, index: int(p.conns.Add(1) - 1)}
			go p.serve(pc)
		}
	}()
}

func (p *scriptedH2) addr() string { return p.ln.Addr().String() }

// serve reads the preface and frames; SETTINGS and PINGs are acked, DATA's windows handed back at once.
func (p *scriptedH2) serve(pc *scriptedConn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(pc.nc, preface); err != nil {
		return
	}
	pc.fr = http2.NewFramer(pc.nc, bufio.NewReader(pc.nc))
	pc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	pc.enc = hpack.NewEncoder(&pc.hbuf)
	pc.enc.SetMaxDynamicTableSizeLimit(0)
	if p.stalled != nil && pc.index == 0 {
		// Windows far larger than anything sent, so Stormgate writes until the kernel's buffers are full.
		pc.do(func() error {
			if err := pc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}); err != nil {
				return err
			}
			return pc.fr.WriteWindowUpdate(0, 1<<31-1-65535)
		})
		p.stalled <- pc
		return
	}
	pc.do(func() error {
		if p.streams > 0 {
			return pc.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: p.streams})
		}
		return pc.fr.WriteSettings()
	})
	bodies := map[uint32][]byte{}
	forgot := map[uint32]bool{}
	defer pc.nc.Close()
	for {
		f, err := pc.fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				pc.do(pc.fr.WriteSettingsAck)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				pc.do(func() error { return pc.fr.WritePing(true, f.Data) })
			}
		case *http2.MetaHeadersFrame:
			if p.head != nil && p.head(pc, f.StreamID, headFields(f.Fields)) {
				forgot[f.StreamID] = true
				break
			}
			bodies[f.StreamID] = []byte{}
			if f.StreamEnded() {
				p.handle(pc, f.StreamID, int(p.requests.Add(1)-1), nil)
			}
		case *http2.DataFrame:
			if n := len(f.Data()); n > 0 {
				pc.do(func() error {
					if err := pc.fr.WriteWindowUpdate(0, uint32(n)); err != nil || forgot[f.StreamID] {
						return err // nothing more on a stream it reset
					}
					return pc.fr.WriteWindowUpdate(f.StreamID, uint32(n))
				})
			}
			if forgot[f.StreamID] {
				break
			}
			bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
			if !f.StreamEnded() && p.partial != nil && p.partial(pc, f.StreamID, bodies[f.StreamID]) {
				forgot[f.StreamID] = true
				delete(bodies, f.StreamID)
			}
			if f.StreamEnded() {
				p.handle(pc, f.StreamID, int(p.requests.Add(1)-1), bodies[f.StreamID])
				delete(bodies, f.StreamID)
			}
		}
	}
}

// headFields is a decoded header list as h2's fields.
func headFields(fs []hpack.HeaderField) []h2.HeaderField {
	out := make([]h2.HeaderField, len(fs))
	for i, f := range fs {
		out[i] = h2.HeaderField{Name: f.Name, Value: f.Value}
	}
	return out
}

func (pc *scriptedConn) do(f func() error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	_ = f()
}

// block encodes a header block (kv: name, value, ...). Under mu.
func (pc *scriptedConn) block(kv ...string) []byte {
	pc.hbuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		_ = pc.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return bytes.Clone(pc.hbuf.Bytes())
}

func (pc *scriptedConn) headers(id uint32, end bool, kv ...string) {
	pc.do(func() error {
		return pc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: pc.block(kv...),
			EndHeaders: true, EndStream: end})
	})
}

// answer echoes body as a gRPC answer: head, DATA, grpc-status 0.
func (pc *scriptedConn) answer(id uint32, body []byte) {
	pc.headers(id, false, ":status", "200", "content-type", "application/grpc")
	pc.do(func() error { return pc.fr.WriteData(id, false, body) })
	pc.headers(id, true, "grpc-status", "0")
}

func (pc *scriptedConn) reset(id uint32, code http2.ErrCode) {
	pc.do(func() error { return pc.fr.WriteRSTStream(id, code) })
}

// notFound is what dubbo-go v3.3.0 answers for a path it does not serve (Go's http.NotFound over h2c).
func (pc *scriptedConn) notFound(id uint32) {
	pc.headers(id, false, ":status", "404", "content-type", "text/plain; charset=utf-8",
		"x-content-type-options", "nosniff", "content-length", "19", "date", "Thu, 03 Dec 2026 05:30:00 GMT")
	pc.do(func() error { return pc.fr.WriteData(id, true, []byte("404 page not found\n")) })
}

func (pc *scriptedConn) goAway(last uint32) {
	pc.do(func() error { return pc.fr.WriteGoAway(last, http2.ErrCodeNo, nil) })
}

// rawAnswer is how one consumer stream ended, read frame by frame.
type rawAnswer struct {
	status, grpcStatus, grpcMessage string
	body                            []byte
	reset                           http2.ErrCode
	wasReset                        bool
}

// readAnswers reads frames from a consumer connection until n streams ended.
func readAnswers(t *testing.T, fr *http2.Framer, n int) map[uint32]*rawAnswer {
	t.Helper()
	return readMoreAnswers(t, fr, n, map[uint32]*rawAnswer{})
}

// readMoreAnswers is readAnswers adding to what out has read of the answers so far.
func readMoreAnswers(t *testing.T, fr *http2.Framer, n int, out map[uint32]*rawAnswer) map[uint32]*rawAnswer {
	t.Helper()
	for ended := 0; ended < n; {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d of %d answers: %v", ended, n, err)
		}
		if noteAnswer(t, out, f) {
			ended++
		}
	}
	return out
}

// noteAnswer adds what frame f says of its stream's answer to out; true when it ended the stream.
func noteAnswer(t *testing.T, out map[uint32]*rawAnswer, f http2.Frame) (ended bool) {
	t.Helper()
	get := func(id uint32) *rawAnswer {
		if out[id] == nil {
			out[id] = &rawAnswer{}
		}
		return out[id]
	}
	switch f := f.(type) {
	case *http2.HeadersFrame:
		a := get(f.StreamID)
		for _, hf := range decodeBlock(t, f.HeaderBlockFragment()) {
			switch hf.Name {
			case ":status":
				a.status = hf.Value
			case "grpc-status":
				a.grpcStatus = hf.Value
			case "grpc-message":
				a.grpcMessage = hf.Value
			}
		}
		return f.StreamEnded()
	case *http2.DataFrame:
		a := get(f.StreamID)
		a.body = append(a.body, f.Data()...)
		return f.StreamEnded()
	case *http2.RSTStreamFrame:
		a := get(f.StreamID)
		a.wasReset, a.reset = true, f.ErrCode
		return true
	}
	return false
}

// readAnswersTicking is readAnswers for a server on a manual clock whose pauses and backoffs must pass:
// the clock moves on 5 ms every 10 ms until the answers are in.
func readAnswersTicking(t *testing.T, fr *http2.Framer, n int, clk *keepalive.ManualClock, srv *proxy.Server) map[uint32]*rawAnswer {
	t.Helper()
	answers := make(chan map[uint32]*rawAnswer, 1)
	go func() { answers <- readAnswers(t, fr, n) }()
	for {
		select {
		case a := <-answers:
			return a
		case <-time.After(10 * time.Millisecond):
			clk.Add(5 * time.Millisecond)
			envOf(srv).Wheel().Advance(clk.Now())
		}
	}
}

// echoed reports whether a is the whole gRPC answer to msg.
func (a *rawAnswer) echoed(msg []byte) bool {
	return a.status == "200" && a.grpcStatus == "0" && bytes.Equal(a.body, grpcFrame(msg)) && !a.wasReset
}

func (a *rawAnswer) String() string {
	return fmt.Sprintf(":status %q grpc-status %q (%q), %d body bytes, reset %v %v", a.status, a.grpcStatus,
		a.grpcMessage, len(a.body), a.wasReset, a.reset)
}

// resendServer is newH2Server for a scripted provider: one provider connection, fast pauses.
func resendServer(t *testing.T, p *scriptedH2, opts proxy.Options, mods ...func(*proxy.Config)) (*proxy.Server, string) {
	t.Helper()
	return newH2ServerWith(t, p.addr(), proxy.ProtoTriple, opts, append([]func(*proxy.Config){func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.BackoffBase, c.BackoffMax = time.Millisecond, 4*time.Millisecond
		c.HoldTimeout = 20 * time.Second
	}}, mods...)...)
}

// TestH2ResendRefused: a provider's RST_STREAM REFUSED_STREAM before any answer proves the call
// unprocessed (RFC 9113 §8.7): Stormgate sends it again and the consumer gets its own answer, never the
// reset. Look-alikes pass through as they are: another reset code, and REFUSED_STREAM after the answer
// head. A provider that refuses everything gets each call at most 1+h2MaxResends times, then the
// consumer gets the refusal.
func TestH2ResendRefused(t *testing.T) {
	for _, c := range []struct {
		name     string
		handle   func(pc *scriptedConn, id uint32, n int, body []byte)
		check    func(a *rawAnswer, msg []byte) bool
		requests int64
		resent   float64
	}{
		{"refused, then answered", func(pc *scriptedConn, id uint32, n int, body []byte) {
			if n == 0 {
				pc.reset(id, http2.ErrCodeRefusedStream)
				return
			}
			pc.answer(id, body)
		}, (*rawAnswer).echoed, 2, 1},
		{"another reset code passes through", func(pc *scriptedConn, id uint32, n int, body []byte) {
			pc.reset(id, http2.ErrCodeInternal)
		}, func(a *rawAnswer, _ []byte) bool { return a.wasReset && a.reset == http2.ErrCodeInternal }, 1, 0},
		{"refused after the answer head passes through", func(pc *scriptedConn, id uint32, n int, body []byte) {
			pc.headers(id, false, ":status", "200", "content-type", "application/grpc")
			pc.reset(id, http2.ErrCodeRefusedStream)
		}, func(a *rawAnswer, _ []byte) bool {
			return a.status == "200" && a.wasReset && a.reset == http2.ErrCodeRefusedStream
		}, 1, 0},
		{"a provider that refuses everything", func(pc *scriptedConn, id uint32, n int, body []byte) {
			pc.reset(id, http2.ErrCodeRefusedStream)
		}, func(a *rawAnswer, _ []byte) bool { return a.wasReset && a.reset == http2.ErrCodeRefusedStream },
			1 + h2MaxResends, h2MaxResends},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startScriptedH2(t, c.handle)
			srv, addr := resendServer(t, p, proxy.Options{})
			_, fr := h2Handshake(t, addr)
			msg := []byte("refused-" + c.name)
			rawRequests(t, fr, 1, msg)
			a := readAnswers(t, fr, 1)[1]
			if !c.check(a, msg) {
				t.Errorf("the consumer got %v", a)
			}
			if n := p.requests.Load(); n != c.requests {
				t.Errorf("the provider got the call %d times, want %d", n, c.requests)
			}
			wantReheld(t, srv, proxy.HoldReheldRefused, c.resent)
		})
	}
}

// TestH2ResendAboveGoAway: streams above the last stream id of a provider's GOAWAY were not processed
// (RFC 9113 §6.8): Stormgate sends them again on a new connection and their consumers get their own
// answers, where before they got RST_STREAM. A stream at or below the id is the provider's: answered, or
// when the connection then dies unanswered, grpc-status 14, never sent again.
func TestH2ResendAboveGoAway(t *testing.T) {
	var first sync.Map // the first connection's streams, by arrival
	var seen atomic.Int64
	p := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) {
		if pc.index > 0 {
			pc.answer(id, body)
			return
		}
		first.Store(int(seen.Add(1)), id)
		if seen.Load() < 3 {
			return
		}
		ids := make([]uint32, 3)
		for i := range ids {
			v, _ := first.Load(i + 1)
			ids[i] = v.(uint32)
		}
		// Streams opened in this order get increasing ids: the first two are kept, the third refused.
		pc.goAway(ids[1])
		pc.answer(ids[0], []byte("answer-0"))
		_ = pc.nc.(*net.TCPConn).SetLinger(0)
		pc.nc.Close() // the second dies unanswered
	})
	srv, addr := resendServer(t, p, proxy.Options{})
	_, fr := h2Handshake(t, addr)
	for i := range 3 {
		writeCall(t, fr, uint32(2*i+1), i == 0, []byte(fmt.Sprintf("call-%d", i)))
		waitFor(t, 10*time.Second, "the call at the provider", func() bool { return seen.Load() == int64(i+1) })
	}
	got := readAnswers(t, fr, 3)
	if a := got[1]; a.grpcStatus != "0" || !bytes.Equal(a.body, []byte("answer-0")) {
		t.Errorf("the stream below the GOAWAY's id: %v, want the provider's answer", a)
	}
	if a := got[3]; a.grpcStatus != "14" {
		t.Errorf("the stream at the GOAWAY's id, unanswered when the connection died: %v, want grpc-status 14", a)
	}
	if a := got[5]; !a.echoed([]byte("call-2")) {
		t.Errorf("the stream above the GOAWAY's id: %v, want its own answer from the next connection", a)
	}
	wantReheld(t, srv, proxy.HoldReheldRefused, 1)
}

// TestH2ResendUnexported: a provider that stops serving a path it served on the same connection is
// unexporting it (a dubbo-go provider's last instant, a Java 3.3 provider between its unexport and its
// GOAWAY): its not-exported answer proves the call never ran whenever it comes, and opens the
// not-executed window from then, as Dubbo's READONLY does. The call waits and is sent again; a path the
// connection never served is still passed on outside the window (TestH2ResendNotFound). Failed before:
// the consumer got the 404.
func TestH2ResendUnexported(t *testing.T) {
	for _, c := range []struct {
		name   string
		notRun func(pc *scriptedConn, id uint32)
		reason string
	}{
		{"dubbo-go", (*scriptedConn).notFound, h2.NotRunDubboGoNotFound},
		{"java 3.3", func(pc *scriptedConn, id uint32) {
			pc.headers(id, true, ":status", "404", "content-type", "application/grpc", "grpc-status", "12",
				"grpc-message", "Invoker for gRPC not found")
		}, h2.NotRunJavaNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
			p := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) {
				if n == 1 { // the second call: the path is being unexported
					c.notRun(pc, id)
					return
				}
				pc.answer(id, body)
			})
			srv, addr := resendServer(t, p, proxy.Options{Clock: clk}, func(cfg *proxy.Config) {
				cfg.NotExecutedWindow, cfg.NotExecutedRetries = time.Second, 3
			})
			clk.Add(2 * time.Second) // long after the connection's start: outside the window
			envOf(srv).Wheel().Advance(clk.Now())
			_, fr := h2Handshake(t, addr)
			writeCall(t, fr, 1, true, []byte("served"))
			if a := readAnswersTicking(t, fr, 1, clk, srv)[1]; !a.echoed([]byte("served")) {
				t.Fatalf("the first call: %v", a)
			}
			writeCall(t, fr, 3, false, []byte("unexported"))
			if a := readAnswersTicking(t, fr, 1, clk, srv)[3]; !a.echoed([]byte("unexported")) {
				t.Errorf("the call the provider answered not-exported for a path it served: %v, want its own answer", a)
			}
			if n := p.requests.Load(); n != 3 {
				t.Errorf("the provider got %d calls, want 3 (one sent again)", n)
			}
			if n := metric(t, srv, "stormgate_not_executed_answers_total", "reason="+c.reason, "outcome="+proxy.NotRunReheld.String()); n != 1 {
				t.Errorf("not-executed answers %s/reheld: %v, want 1", c.reason, n)
			}
			wantReheld(t, srv, proxy.HoldReheldNotRun, 1)
		})
	}
}

// wantReheld wants want calls counted in stormgate_hold_outcomes_total{outcome=o} (the calls sent again),
// and then, once every call is done, every byte kept for a resend released.
func wantReheld(t *testing.T, srv *proxy.Server, o proxy.HoldOutcome, want float64) {
	t.Helper()
	if n := holdOutcome(t, srv, o); n != want {
		t.Errorf("%s %v, want %v", o, n, want)
	}
	waitFor(t, 10*time.Second, "every kept byte released", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// writeCall sends one whole gRPC call on stream id (first: the connection's first header block), its head
// with the extra fields.
func writeCall(t *testing.T, fr *http2.Framer, id uint32, first bool, msg []byte, extra ...h2.HeaderField) {
	t.Helper()
	writeHead(t, fr, id, first, extra...)
	if err := fr.WriteData(id, true, grpcFrame(msg)); err != nil {
		t.Fatal(err)
	}
}

// writeHead opens stream id with a request head for /stormgate.Test/Echo; the first block of a connection
// begins with the dynamic table size update Stormgate requires.
func writeHead(t *testing.T, fr *http2.Framer, id uint32, first bool, extra ...h2.HeaderField) {
	t.Helper()
	fields := append(decodeBlock(t, staticHead()), extra...)
	block := h2.AppendFields(nil, fields)
	if first {
		var hb bytes.Buffer
		enc := hpackEncoder(&hb)
		for _, f := range fields {
			enc(f.Name, f.Value)
		}
		block = hb.Bytes()
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}

// TestH2ResendNotFound: dubbo-go's 404 for a path it does not serve yet, within hold.not_executed_window
// of the connection's start, proves the call never ran: sent again after a pause, up to
// hold.not_executed_retries times. Passed through as it is: outside the window, once the retries are
// used, and a look-alike (a gRPC UNIMPLEMENTED with :status 404).
func TestH2ResendNotFound(t *testing.T) {
	notFoundThenAnswer := func(pc *scriptedConn, id uint32, n int, body []byte) {
		if n == 0 {
			pc.notFound(id)
			return
		}
		pc.answer(id, body)
	}
	notFound := func(a *rawAnswer, _ []byte) bool {
		return a.status == "404" && bytes.Equal(a.body, []byte("404 page not found\n"))
	}
	for _, c := range []struct {
		name     string
		handle   func(pc *scriptedConn, id uint32, n int, body []byte)
		late     bool // the call comes after the window
		check    func(a *rawAnswer, msg []byte) bool
		requests int64
		outcome  proxy.NotRunOutcome
		counted  float64
		reason   string // "": h2.NotRunDubboGoNotFound
	}{
		{"not found, then answered", notFoundThenAnswer, false, (*rawAnswer).echoed, 2, proxy.NotRunReheld, 1, ""},
		{"java's not found, then answered", func(pc *scriptedConn, id uint32, n int, body []byte) {
			if n == 0 {
				pc.headers(id, true, ":status", "404", "content-type", "application/grpc", "grpc-status", "12",
					"grpc-message", "Invoker for gRPC not found")
				return
			}
			pc.answer(id, body)
		}, false, (*rawAnswer).echoed, 2, proxy.NotRunReheld, 1, h2.NotRunJavaNotFound},
		{"outside the window", notFoundThenAnswer, true, notFound, 1, proxy.NotRunOutsideWindow, 1, ""},
		{"retries used up", func(pc *scriptedConn, id uint32, n int, body []byte) { pc.notFound(id) }, false,
			notFound, 4, proxy.NotRunPassedOn, 1, ""},
		{"a gRPC UNIMPLEMENTED is not the form", func(pc *scriptedConn, id uint32, n int, body []byte) {
			pc.headers(id, true, ":status", "404", "content-type", "application/grpc", "grpc-status", "12")
		}, false, func(a *rawAnswer, _ []byte) bool { return a.status == "404" && a.grpcStatus == "12" }, 1, proxy.NotRunReheld, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
			p := startScriptedH2(t, c.handle)
			srv, addr := resendServer(t, p, proxy.Options{Clock: clk}, func(cfg *proxy.Config) {
				cfg.NotExecutedWindow, cfg.NotExecutedRetries = time.Second, 3
			})
			if c.late {
				clk.Add(2 * time.Second)
				envOf(srv).Wheel().Advance(clk.Now())
			}
			_, fr := h2Handshake(t, addr)
			msg := []byte("not-found-" + c.name)
			rawRequests(t, fr, 1, msg)
			a := readAnswersTicking(t, fr, 1, clk, srv)[1]
			if !c.check(a, msg) {
				t.Errorf("the consumer got %v", a)
			}
			if n := p.requests.Load(); n != c.requests {
				t.Errorf("the provider got the call %d times, want %d", n, c.requests)
			}
			reason := c.reason
			if reason == "" {
				reason = h2.NotRunDubboGoNotFound
			}
			if n := metric(t, srv, "stormgate_not_executed_answers_total", "reason="+reason, "outcome="+c.outcome.String()); n != c.counted {
				t.Errorf("not-executed answers %s/%s: %v, want %v", reason, c.outcome, n, c.counted)
			}
			waitFor(t, 10*time.Second, "every kept byte released", func() bool { return envOf(srv).Budget().InUse() == 0 })
		})
	}
}

// TestH2ResendUnsent: a call none of whose bytes reached the kernel when its provider connection died is
// sent again on the next connection. Here the provider stops reading; a 16 MiB call fills the kernel's
// buffers and a small call queues behind it in Stormgate; the provider resets the connection. The large
// call, partly written, gets grpc-status 14; the small one its own answer.
func TestH2ResendUnsent(t *testing.T) {
	p := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) { pc.answer(id, body) })
	p.stalled = make(chan *scriptedConn, 1)
	srv, addr := resendServer(t, p, proxy.Options{}, func(c *proxy.Config) { c.MaxBufferedBytes = 256 << 20 })
	stalled := <-p.stalled
	fr := backUpCalls(t, srv, addr)
	_ = stalled.nc.(*net.TCPConn).SetLinger(0)
	stalled.nc.Close()
	got := readAnswers(t, fr, 2)
	if a := got[1]; a.grpcStatus != "14" {
		t.Errorf("the big call, partly written when the connection died: %v, want grpc-status 14", a)
	}
	if a := got[3]; !a.echoed([]byte("small-call")) {
		t.Errorf("the small call, never written: %v, want its own answer from the next connection", a)
	}
	wantReheld(t, srv, proxy.HoldReheld, 1)
}

// backUpCalls makes two calls on a provider connection that does not read: stream 1, 16 MiB, fills the
// kernel's buffers and backs up in Stormgate's writer; stream 3, small and whole, queues behind it, none
// of its bytes written. It returns the consumer's framer.
func backUpCalls(t *testing.T, srv *proxy.Server, addr string) *http2.Framer {
	t.Helper()
	_, fr := h2Handshake(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	big := bytes.Repeat([]byte("big-call "), 16<<20/9)
	writing := make(chan error, 1)
	writeHead(t, fr, 1, true)
	go func() {
		body := grpcFrame(big)
		for len(body) > 0 { // within the consumer's default windows: Stormgate hands them back as it forwards
			n := min(len(body), 16<<10)
			if err := fr.WriteData(1, n == len(body), body[:n]); err != nil {
				writing <- err
				return
			}
			body = body[n:]
		}
		writing <- nil
	}()
	hp := poolOf(srv)
	backedUp := func() bool { // the big call's bytes wait in Stormgate's writer: the kernel's buffers are full
		hp.mu.Lock()
		defer hp.mu.Unlock()
		if len(hp.ups) == 0 {
			return false
		}
		return hp.ups[0].w.Queued() > 1<<20
	}
	waitFor(t, 30*time.Second, "the big call backed up in Stormgate", backedUp)
	if err := <-writing; err != nil {
		t.Fatal(err)
	}
	writeCall(t, fr, 3, false, []byte("small-call"))
	// Whole, END_STREAM read: a call still arriving is never held (replay.go), and the consumer's HEADERS
	// and DATA can reach Stormgate in two reads.
	waitFor(t, 10*time.Second, "the small call, whole, on the stalled connection", func() bool {
		hp.mu.Lock()
		defer hp.mu.Unlock()
		if len(hp.ups) != 1 || hp.ups[0].calls.Len() != 2 {
			return false
		}
		for c := range hp.ups[0].calls.Values() {
			if c.down == 3 {
				return c.req.complete
			}
		}
		return false
	})
	return fr
}

// TestH2DeadlineWhileWaiting: a call that waits for a provider stream is never sent once its own
// grpc-timeout, less hold.deadline_margin, has passed: its consumer gets grpc-status 4 from Stormgate and
// the provider never sees it. A call with time left is sent when a stream frees; hold.max_timeout 0 ignores
// consumers' timeouts (the call waits up to hold.timeout).
func TestH2DeadlineWhileWaiting(t *testing.T) {
	for _, honour := range []bool{true, false} {
		t.Run(fmt.Sprintf("honour=%v", honour), func(t *testing.T) {
			clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
			var held sync.Map // stream id -> connection, for the call the provider keeps
			p := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) {
				if n == 0 {
					held.Store(id, pc)
					return
				}
				pc.answer(id, body)
			})
			p.streams = 1
			srv, addr := resendServer(t, p, proxy.Options{Clock: clk}, func(c *proxy.Config) {
				c.HoldTimeout, c.DeadlineMargin = 20*time.Second, 100*time.Millisecond
				if !honour {
					c.HoldMaxTimeout = 0
				}
			})
			_, fr := h2Handshake(t, addr)
			writeCall(t, fr, 1, true, []byte("takes the only stream"))
			waitFor(t, 10*time.Second, "the first call at the provider", func() bool { return p.requests.Load() == 1 })
			timeout := h2.HeaderField{Name: "grpc-timeout", Value: "1000m"}
			writeCall(t, fr, 3, false, []byte("short timeout"), timeout)
			writeCall(t, fr, 5, false, []byte("long timeout"), h2.HeaderField{Name: "grpc-timeout", Value: "30S"})
			hp := poolOf(srv)
			waitFor(t, 10*time.Second, "two calls waiting", func() bool {
				hp.mu.Lock()
				defer hp.mu.Unlock()
				return hp.prov.Hold().CallsWaiting() == 2
			})
			clk.Add(950 * time.Millisecond) // past the short call's sendBy (900 ms)
			envOf(srv).Wheel().Advance(clk.Now())
			if honour {
				a := readAnswers(t, fr, 1)[3]
				if a.grpcStatus != "4" || !strings.Contains(a.grpcMessage, "never received it") {
					t.Fatalf("the call whose timeout passed: %v, want grpc-status 4 from Stormgate", a)
				}
				if n := holdOutcome(t, srv, proxy.HoldDeadline); n != 1 {
					t.Errorf("hold outcome deadline %v, want 1", n)
				}
			}
			v, _ := held.Load(uint32(1))
			v.(*scriptedConn).answer(1, grpcFrame([]byte("takes the only stream")))
			want := map[uint32]bool{1: true, 5: true}
			if !honour {
				want[3] = true // sent after its consumer's timeout: what hold.max_timeout 0 means
			}
			got := readAnswers(t, fr, len(want))
			for id := range want {
				if a := got[id]; a == nil || a.grpcStatus != "0" {
					t.Errorf("stream %d: %v, want the provider's answer", id, a)
				}
			}
			if n, w := p.requests.Load(), int64(len(want)); n != w {
				t.Errorf("the provider got %d calls, want %d", n, w)
			}
		})
	}
}

// TestH2ResendUnread: a call Stormgate wrote to the provider's socket that the provider's application never
// read (its kernel says so when the socket is destroyed: proxy/peerdiag.go) is sent again on the next connection;
// one the application had read is not, and gets grpc-status 14 (it may have run), also when the provider
// then aborts with SO_LINGER 0: that socket is announced with zeroed counters ("read 0 bytes") and peer
// port, which prove nothing (they match no registration here; providerRead also refuses counters below what
// Stormgate's kernel saw acknowledged). Taken at face value they would have sent the call again: run twice.
func TestH2ResendUnread(t *testing.T) {
	if !diagAvailable() {
		t.Skip("the kernel offers no sock_diag destroy announcements here")
	}
	t.Run("never read", testH2ResendUnread)
	for _, abort := range []bool{false, true} {
		t.Run(fmt.Sprintf("read, not answered, abort=%v", abort), func(t *testing.T) { testH2ReadNotAnswered(t, abort) })
	}
}

func testH2ReadNotAnswered(t *testing.T, abort bool) {
	{
		p := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) {
			if n == 0 {
				if abort {
					_ = pc.nc.(*net.TCPConn).SetLinger(0)
				}
				pc.nc.Close() // read it, and went away without answering
				return
			}
			pc.answer(id, body)
		})
		clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
		srv, addr := resendServer(t, p, proxy.Options{Clock: clk})
		clk.Add(time.Second)
		envOf(srv).Wheel().Advance(clk.Now())
		_, fr := h2Handshake(t, addr)
		writeCall(t, fr, 1, true, []byte("read"))
		if a := readAnswersTicking(t, fr, 1, clk, srv)[1]; a.grpcStatus != "14" {
			t.Errorf("the call the provider had read: %v, want grpc-status 14", a)
		}
		if n := p.requests.Load(); n != 1 {
			t.Errorf("the provider got the call %d times, want 1", n)
		}
		if n := holdOutcome(t, srv, proxy.HoldReheldUnseen); n != 0 {
			t.Errorf("reheld_unseen %v, want 0", n)
		}
	}
}

func testH2ResendUnread(t *testing.T) {
	p := startScriptedH2(t, func(pc *scriptedConn, id uint32, n int, body []byte) { pc.answer(id, body) })
	p.stalled = make(chan *scriptedConn, 1)
	clk := keepalive.NewManualClock(time.Unix(1_700_000_000, 0))
	srv, addr := resendServer(t, p, proxy.Options{Clock: clk})
	stalled := <-p.stalled
	clk.Add(time.Second) // an announcement within diagFresh of connecting proves nothing
	envOf(srv).Wheel().Advance(clk.Now())
	_, fr := h2Handshake(t, addr)
	writeCall(t, fr, 1, true, []byte("never read"))
	hp := poolOf(srv)
	waitFor(t, 10*time.Second, "the call written to the provider's socket", func() bool {
		hp.mu.Lock()
		defer hp.mu.Unlock()
		if len(hp.ups) != 1 || hp.ups[0].calls.Len() != 1 {
			return false
		}
		u := hp.ups[0]
		var c *h2Call
		for c = range u.calls.Values() {
		}
		return c.req.complete && u.w.Queued() == 0 && u.w.Written() > c.upOff // whole: see TestH2ResendUnsent
	})
	stalled.nc.Close() // with the call unread in its receive queue: the kernel resets
	a := readAnswersTicking(t, fr, 1, clk, srv)[1]
	if unseen := holdOutcome(t, srv, proxy.HoldReheldUnseen); !a.echoed([]byte("never read")) || unseen != 1 {
		t.Errorf("the call the provider never read: %v, reheld_unseen %v; want its own answer from the next "+
			"connection, 1", a, unseen)
	}
}
