package h2

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Each known HTTP/2 attack, sent to a consumer-side Conn: what it gets (GOAWAY with the right code, or
// RST_STREAM) and that it is counted. Honest look-alikes (the same frames at an honest rate) must pass.

func TestGuardRapidReset(t *testing.T) {
	// CVE-2023-44487: open a stream, reset it at once, repeat. Each reset frees the concurrency slot, so
	// SETTINGS_MAX_CONCURRENT_STREAMS alone does not bound the work.
	d := serverDriver(t, Config{})
	id := uint32(1)
	for ; d.err == nil && id < 20000; id += 2 {
		d.headers(id, false, request("/s/m")...)
		d.must(d.fr.WriteRSTStream(id, http2.ErrCodeCancel))
		d.pump()
	}
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardRapidReset)
	if n := d.c.Counters().ResetsReceived; n != uint64(DefaultLimits().ResetBurst)+1 {
		t.Fatalf("tripped after %d resets, want burst+1", n)
	}

	// An honest client cancelling a call every 100 ms for ten minutes is never stopped.
	d = serverDriver(t, Config{})
	for id := uint32(1); id < 12000; id += 2 {
		d.now += int64(100 * time.Millisecond)
		d.headers(id, false, request("/s/m")...)
		d.must(d.fr.WriteRSTStream(id, http2.ErrCodeCancel))
		d.pump()
	}
	if d.err != nil {
		t.Fatalf("honest cancels: %v", d.err)
	}
}

func TestGuardMadeYouReset(t *testing.T) {
	// CVE-2025-8671: frames that make the server reset streams itself (here WINDOW_UPDATE of 0) spend the
	// same budget as the peer's own resets.
	d := serverDriver(t, Config{})
	for id := uint32(1); d.err == nil && id < 20000; id += 2 {
		d.headers(id, false, request("/s/m")...)
		d.must(d.fr.WriteWindowUpdate(id, 0))
		d.pump()
	}
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardRapidReset)
}

func TestGuardContinuationFlood(t *testing.T) {
	// CVE-2024-27316 family: a HEADERS without END_HEADERS, then CONTINUATION frames without end: the
	// connection ends at the ninth CONTINUATION, before any decoding or unbounded buffering.
	d := serverDriver(t, Config{})
	d.must(d.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x83}}))
	for i := 0; i < 1000; i++ {
		d.must(d.fr.WriteContinuation(1, false, []byte{0x40, 1, 'x', 1, 'y'}))
	}
	d.pump()
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardContinuation)
	if f := d.c.Counters().Frames; f != 2+1+DefaultMaxContinuations+1 {
		t.Fatalf("read %d frames", f)
	}
	// The byte bound: a few large CONTINUATIONs past the header list bound.
	d = serverDriver(t, Config{MaxHeaderListSize: 4096})
	d.must(d.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: make([]byte, 3000)}))
	d.must(d.fr.WriteContinuation(1, false, make([]byte, 3000)))
	d.pump()
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardContinuation)
	// Any other frame inside a header block is a PROTOCOL_ERROR.
	d = serverDriver(t, Config{})
	d.must(d.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x83}}))
	d.must(d.fr.WritePing(false, [8]byte{}))
	d.pump()
	d.wantGoAway(ErrCodeProtocol, NumGuards)
}

func TestGuardPingFlood(t *testing.T) {
	d := serverDriver(t, Config{})
	for i := 0; d.err == nil && i < 10000; i++ {
		d.must(d.fr.WritePing(false, [8]byte{byte(i)}))
		d.pump()
	}
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardPingFlood)
	if n := d.c.Counters().PingsAnswered; n != uint64(DefaultLimits().ControlBurst) {
		t.Fatalf("answered %d", n)
	}
	// dubbo-go's keepalive, a PING every 10 s for a day, and a BDP-estimating client that PINGs after every
	// DATA it receives, are never stopped.
	d = serverDriver(t, Config{})
	for i := 0; i < 8640; i++ {
		d.now += int64(10 * time.Second)
		d.must(d.fr.WritePing(false, [8]byte{1}))
		d.pump()
	}
	d.requestWithHead(1, true)
	for i := 0; i < 5000; i++ {
		if _, _, err := d.c.AppendData(d.now, nil, 1, []byte("x"), false); err != nil {
			t.Fatalf("after %d rounds: %v (%v)", i, err, d.err)
		}
		d.must(d.fr.WritePing(false, [8]byte{2}))
		d.must(d.fr.WriteWindowUpdate(1, 1))
		d.must(d.fr.WriteWindowUpdate(0, 1))
		d.pump()
	}
	if d.err != nil {
		t.Fatalf("honest PINGs: %v", d.err)
	}
}

// TestGuardHonestAnswersToBursts: a peer that hands the flow-control window back for every DATA frame it
// reads (a stream and a connection WINDOW_UPDATE each, as RFC 9113 allows and simple clients do) is not
// a flood, however many frames this side wrote in one pass: Stormgate writes the answers of a hundred
// calls at once on a busy connection, and a provider connection carries a hundred consumers' request
// bodies. Failed before: the free answers earned were capped at 64, 16 frames' worth, so the second
// burst of 100 frames ran the control budget out (GOAWAY ENHANCE_YOUR_CALM, every call on it lost).
func TestGuardHonestAnswersToBursts(t *testing.T) {
	const streams, bursts = 100, 20
	d := serverDriver(t, Config{MaxConcurrentStreams: streams})
	for id := uint32(1); id < 2*streams; id += 2 {
		d.requestWithHead(id, true)
	}
	for b := range bursts {
		var out []byte
		for id := uint32(1); id < 2*streams; id += 2 {
			var err error
			if out, _, err = d.c.AppendData(d.now, out, id, []byte("x"), false); err != nil {
				t.Fatalf("burst %d: %v (%v)", b, err, d.err)
			}
		}
		for id := uint32(1); id < 2*streams; id += 2 { // the peer reads them and answers each
			d.must(d.fr.WriteWindowUpdate(id, 1))
			d.must(d.fr.WriteWindowUpdate(0, 1))
		}
		d.pump()
		if d.err != nil {
			t.Fatalf("burst %d of %d frames, each answered with its window: %v", b, streams, d.err)
		}
	}
}

func TestGuardSettingsFlood(t *testing.T) {
	d := serverDriver(t, Config{})
	for i := 0; d.err == nil && i < 10000; i++ {
		d.must(d.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(i)}))
		d.pump()
	}
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardSettingsFlood)
}

func TestGuardControlFlood(t *testing.T) {
	// PRIORITY frames (ignored since RFC 9113, but each costs a parse) and unknown frame types.
	d := serverDriver(t, Config{})
	for i := 0; d.err == nil && i < 10000; i++ {
		d.must(d.fr.WritePriority(uint32(2*i+1), http2.PriorityParam{StreamDep: 0, Weight: 1}))
		d.must(d.fr.WriteRawFrame(0xfa, 0, 0, []byte("junk")))
		d.pump()
	}
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardControlFlood)
}

func TestGuardEmptyFrames(t *testing.T) {
	d := serverDriver(t, Config{})
	d.headers(1, false, request("/s/m")...)
	for i := 0; i < 100; i++ {
		d.must(d.fr.WriteData(1, false, nil))
	}
	d.pump()
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardEmptyFrames)
	// Padding-only DATA frames are empty too.
	d = serverDriver(t, Config{})
	d.headers(1, false, request("/s/m")...)
	for i := 0; i < 100; i++ {
		d.must(d.fr.WriteDataPadded(1, false, nil, make([]byte, 10)))
	}
	d.pump()
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardEmptyFrames)
	// Empty frames between real ones are fine (an empty DATA with END_STREAM is how many clients end).
	d = serverDriver(t, Config{})
	d.headers(1, false, request("/s/m")...)
	for i := 0; i < 100; i++ {
		d.must(d.fr.WriteData(1, false, nil))
		d.must(d.fr.WriteData(1, false, []byte("x")))
	}
	d.must(d.fr.WriteData(1, true, nil))
	d.pump()
	if d.err != nil {
		t.Fatal(d.err)
	}
}

func TestGuardHeaderListSize(t *testing.T) {
	// A header list over the bound whose encoded block is within it (HPACK indexing makes the list larger
	// than the block): that stream is reset, the connection and its HPACK state go on.
	d := serverDriver(t, Config{MaxHeaderListSize: 2048})
	d.encBuf.Reset()
	for _, f := range request("/s/m") {
		d.must(d.enc.WriteField(f))
	}
	// Index one 200-byte field before the ack made the table size 0? The driver already acked, so use
	// many literal fields instead: 40 fields of 60 bytes each is 2,400+ bytes listed, 1,700 encoded.
	for i := 0; i < 40; i++ {
		d.must(d.enc.WriteField(HeaderField{Name: "x-h", Value: strings.Repeat("z", 27)}))
	}
	if d.encBuf.Len() > 2048 {
		t.Fatalf("block %d bytes: the test wants it under the bound", d.encBuf.Len())
	}
	d.must(d.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: d.encBuf.Bytes(), EndHeaders: true, EndStream: true}))
	d.pump()
	d.wantRST(1, ErrCodeEnhanceYourCalm, GuardHeaderList)
	d.headers(3, true, request("/s/m")...)
	d.pump()
	if ev := d.events[len(d.events)-1]; ev.Kind != EventHeaders || ev.Stream != 3 {
		t.Fatalf("next request: %+v", ev)
	}
}

func TestGuardTooManyStreams(t *testing.T) {
	d := serverDriver(t, Config{MaxConcurrentStreams: 10})
	for id := uint32(1); id <= 21; id += 2 {
		d.headers(id, false, request("/s/m")...)
	}
	d.pump()
	d.wantRST(21, ErrCodeRefusedStream, GuardTooManyStreams)
	if d.c.OpenStreams() != 10 {
		t.Fatalf("open %d", d.c.OpenStreams())
	}
	// A peer that keeps opening streams over the limit spends the reset budget.
	for id := uint32(23); d.err == nil && id < 20000; id += 2 {
		d.headers(id, false, request("/s/m")...)
		d.pump()
	}
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardRapidReset)
}

func TestGuardZeroWindowStall(t *testing.T) {
	// The consumer announces a zero window and never opens it: its streams' answers cannot go out. After
	// the stall timeout the stream is reset (the owner then drops what it queued for it).
	d := serverDriver(t, Config{}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	d.requestWithHead(1, true)
	if _, n, _ := d.c.AppendData(d.now, nil, 1, make([]byte, 100), false); n != 0 {
		t.Fatalf("sent %d into a zero window", n)
	}
	if _, ok, _ := d.c.CheckStalls(d.now + int64(29*time.Second)); ok {
		t.Fatal("reset before the timeout")
	}
	id, ok, err := d.c.CheckStalls(d.now + int64(30*time.Second))
	if !ok || id != 1 || err != nil {
		t.Fatal(id, ok, err)
	}
	d.pump()
	d.wantRST(1, ErrCodeCancel, GuardZeroWindow)
	// A window that opens in time clears the stall.
	d.requestWithHead(3, true)
	_, _, _ = d.c.AppendData(d.now, nil, 3, make([]byte, 100), false)
	d.must(d.fr.WriteWindowUpdate(3, 100))
	d.pump()
	if _, n, _ := d.c.AppendData(d.now, nil, 3, make([]byte, 100), false); n != 100 {
		t.Fatalf("sent %d", n)
	}
	if _, ok, _ := d.c.CheckStalls(d.now + int64(time.Hour)); ok {
		t.Fatal("unblocked stream reset")
	}
}

func TestGuardZeroWindowProgress(t *testing.T) {
	// A consumer that reads slowly but reads (its window opens a little at a time) is not stalled: the stall
	// timeout counts from the last byte that went out, and NextStall says when the owner must look again.
	d := serverDriver(t, Config{Limits: Limits{StallTimeout: 30 * time.Second}}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	d.requestWithHead(1, true)
	start := d.now
	if _, n, _ := d.c.AppendData(start, nil, 1, make([]byte, 100), false); n != 0 {
		t.Fatalf("sent %d into a zero window", n)
	}
	if at, ok := d.c.NextStall(); !ok || at != start+int64(30*time.Second) {
		t.Fatalf("NextStall %d %v, want start+30s", at-start, ok)
	}
	d.must(d.fr.WriteWindowUpdate(1, 10))
	d.pump()
	later := start + int64(20*time.Second)
	if _, n, _ := d.c.AppendData(later, nil, 1, make([]byte, 100), false); n != 10 {
		t.Fatalf("sent %d, want the 10 bytes of window", n)
	}
	if at, ok := d.c.NextStall(); !ok || at != later+int64(30*time.Second) {
		t.Fatalf("NextStall %d after progress, want 50 s after start", at-start)
	}
	if _, ok, _ := d.c.CheckStalls(start + int64(35*time.Second)); ok {
		t.Fatal("reset 15 s after the last byte went out")
	}
	// The owner may shorten the timeout while the Conn lives (a live setting).
	d.c.SetStallTimeout(10 * time.Second)
	if id, ok, _ := d.c.CheckStalls(later + int64(10*time.Second)); !ok || id != 1 {
		t.Fatalf("not reset 10 s after the last byte with a 10 s timeout: %d %v", id, ok)
	}
	if _, ok := d.c.NextStall(); ok {
		t.Fatal("NextStall with no stream waiting")
	}
}

func TestGuardStreamIDBackwards(t *testing.T) {
	d := serverDriver(t, Config{})
	d.headers(5, true, request("/s/m")...)
	d.headers(3, true, request("/s/m")...)
	d.pump()
	d.wantGoAway(ErrCodeProtocol, GuardStreamID)
	if ga := goAwayOf(nil); ga != nil {
		t.Fatal()
	}
	// Even ids are the server's.
	d = serverDriver(t, Config{})
	d.headers(2, true, request("/s/m")...)
	d.pump()
	d.wantGoAway(ErrCodeProtocol, GuardStreamID)
}

func TestGuardClosedStream(t *testing.T) {
	d := serverDriver(t, Config{})
	d.headers(1, true, request("/s/m")...)
	d.pump()
	_, _ = d.c.AppendHeaders(nil, 1, []HeaderField{{Name: ":status", Value: "200"}}, true)
	if d.c.StreamState(1) != StateClosed {
		t.Fatal(d.c.StreamState(1))
	}
	// DATA on the closed stream: RST_STREAM STREAM_CLOSED.
	d.must(d.fr.WriteData(1, false, []byte("x")))
	d.pump()
	d.wantRST(1, ErrCodeStreamClosed, GuardClosedStream)
	// HEADERS on a stream that closed normally: the connection ends with STREAM_CLOSED.
	d = serverDriver(t, Config{})
	d.headers(1, true, request("/s/m")...)
	d.pump()
	_, _ = d.c.AppendHeaders(nil, 1, []HeaderField{{Name: ":status", Value: "200"}}, true)
	d.headers(1, true, request("/s/m")...)
	d.pump()
	d.wantGoAway(ErrCodeStreamClosed, GuardClosedStream)
	// Frames the peer had in flight when this side reset the stream are ignored (§5.4.2), and still
	// returned to the connection window.
	d = serverDriver(t, Config{})
	d.headers(1, false, request("/s/m")...)
	d.pump()
	d.must(d.c.Reset(1, ErrCodeCancel))
	d.must(d.fr.WriteData(1, false, make([]byte, 100)))
	d.headers(1, true, HeaderField{Name: "grpc-status", Value: "0"})
	d.pump()
	if d.err != nil || d.c.Counters().Guards[GuardClosedStream] != 0 {
		t.Fatalf("%v %v", d.err, d.c.Counters().Guards)
	}
}

func TestGuardPreface(t *testing.T) {
	for name, in := range map[string]string{
		"http1":     "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\n\r\n",
		"garbage":   "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
		"dubbo":     "\xda\xbb\xe2\x00",
		"not first": ClientPreface + string(AppendPing(nil, false, [8]byte{})),
	} {
		d := newDriver(t, Config{})
		d.outFrames()
		d.in.WriteString(in)
		d.pump()
		d.wantGoAway(ErrCodeProtocol, GuardPreface)
		if ga := d.c.Counters(); !ga.GoAwaySent {
			t.Fatalf("%s: %+v", name, ga)
		}
	}
}

func TestGuardOutboundQueue(t *testing.T) {
	// A peer that sends PINGs but never reads the answers: the owner stops reading when it cannot write;
	// an owner that keeps reading hits the queue bound instead of growing Output without end.
	d := serverDriver(t, Config{Limits: Limits{ControlBurst: 1 << 20, MaxQueuedControl: 100}})
	for i := 0; i < 200; i++ {
		d.must(d.fr.WritePing(false, [8]byte{}))
	}
	buf := d.in.Bytes()
	var err error
	for n := 1; n > 0 && err == nil; {
		n, _, err = d.c.Read(d.now, buf)
		buf = buf[n:]
	}
	if verdict(err) != "conn:ENHANCE_YOUR_CALM" || d.c.Counters().Guards[GuardOutboundQueue] != 1 {
		t.Fatalf("%v %v", err, d.c.Counters().Guards)
	}
}

// TestGuardContinuationPaidByBytes: the CONTINUATION bound follows the byte bound (Assembler). Each 16 KiB
// of the block pays for one frame; DefaultMaxContinuations more are free, whatever they carry.
func TestGuardContinuationPaidByBytes(t *testing.T) {
	const bound = 1 << 20
	cont := FrameHeader{Type: FrameContinuation, StreamID: 1}
	// A block of exactly the bound in 16 KiB frames: HEADERS + 63 CONTINUATIONs.
	a := NewAssembler(bound, DefaultMaxContinuations)
	if _, _, _, err := a.Add(FrameHeader{Type: FrameHeaders, StreamID: 1}, make([]byte, DefaultMaxFrameSize)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < bound/DefaultMaxFrameSize; i++ {
		last := i == bound/DefaultMaxFrameSize-1
		h := cont
		if last {
			h.Flags = FlagEndHeaders
		}
		block, _, done, err := a.Add(h, make([]byte, DefaultMaxFrameSize))
		if err != nil {
			t.Fatalf("CONTINUATION %d of a block within the bound: %v", i, err)
		}
		if done != last || done && len(block) != bound {
			t.Fatalf("CONTINUATION %d: done %v, %d bytes", i, done, len(block))
		}
	}
	// Two full frames pay for two CONTINUATIONs (one was sent) plus the free ones: the 11th CONTINUATION,
	// the 9th that carries next to nothing, ends it.
	a = NewAssembler(bound, DefaultMaxContinuations)
	_, _, _, _ = a.Add(FrameHeader{Type: FrameHeaders, StreamID: 1}, make([]byte, DefaultMaxFrameSize))
	if _, _, _, err := a.Add(cont, make([]byte, DefaultMaxFrameSize)); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 2+DefaultMaxContinuations; i++ {
		if _, _, _, err := a.Add(cont, []byte{0x40}); err != nil {
			t.Fatalf("CONTINUATION %d: %v", i, err)
		}
	}
	if _, _, _, err := a.Add(cont, []byte{0x40}); err != errTooManyContinuals {
		t.Fatalf("CONTINUATION %d: %v, want %v", 3+DefaultMaxContinuations, err, errTooManyContinuals)
	}
	// The byte bound still holds, in frames paid for or not.
	a = NewAssembler(bound, DefaultMaxContinuations)
	_, _, _, _ = a.Add(FrameHeader{Type: FrameHeaders, StreamID: 1}, make([]byte, bound-10))
	if _, _, _, err := a.Add(cont, make([]byte, 11)); err != errBlockTooLarge {
		t.Fatalf("one byte over the bound: %v", err)
	}
}

// TestGuardContinuationBigBlocks: with the header list bound raised to 1 MiB, a header block of nearly
// that size, sent as HEADERS and some sixty 16 KiB CONTINUATIONs, passes in both roles (a request head
// to a consumer-side Conn; a response head and trailers to a provider-side one) and the connection lives;
// a flood of small CONTINUATIONs still ends it after DefaultMaxContinuations frames, in both roles.
func TestGuardContinuationBigBlocks(t *testing.T) {
	const bound = 1 << 20
	// '~' has a 13-bit Huffman code: the value goes as it is, so the encoded block is nearly the list.
	big := func(name string, fields ...HeaderField) []HeaderField {
		n := bound - ListSize(fields) - 32 - len(name)
		return append(fields, HeaderField{Name: name, Value: strings.Repeat("~", n)})
	}
	p := newPair(t, Config{MaxHeaderListSize: bound}, Config{MaxHeaderListSize: bound})
	id, err := p.cli.OpenStream()
	p.must(err)
	req := big("x-big", request("/s/m")...)
	if ListSize(req) != bound {
		t.Fatalf("list of %d bytes, want the bound", ListSize(req))
	}
	b, err := p.cli.AppendHeaders(nil, id, req, false)
	p.must(err)
	if n := len(b) / (FrameHeaderLen + DefaultMaxFrameSize); n <= DefaultMaxContinuations+1 {
		t.Fatalf("the block is %d full frames: not past the fixed bound", n)
	}
	p.toSrv(b)
	p.toCli(nil)
	b, err = p.srv.AppendHeaders(nil, id, big("x-big", HeaderField{Name: ":status", Value: "200"}), false)
	p.must(err)
	p.toCli(b)
	b, err = p.srv.AppendHeaders(nil, id, big("grpc-message", HeaderField{Name: "grpc-status", Value: "13"}), true)
	p.must(err)
	p.toCli(b)
	bigHeads := func(evs []Event) (n int) {
		for _, ev := range evs {
			if ev.Kind == EventHeaders && ListSize(ev.Fields) == bound {
				n++
			}
		}
		return n
	}
	if n := bigHeads(p.srvEv); n != 1 {
		t.Fatalf("consumer side: %d big header sections, want the request head", n)
	}
	if n := bigHeads(p.cliEv); n != 2 || p.cli.Err() != nil || p.srv.Err() != nil {
		t.Fatalf("provider side: %d big header sections, want head and trailers (%v, %v)", n, p.cli.Err(), p.srv.Err())
	}

	// The flood, at the same bound: HEADERS then CONTINUATIONs of 5 bytes that never end the block.
	flood := func(id uint32) []byte {
		b := AppendFrameHeader(nil, FrameHeader{Length: 1, Type: FrameHeaders, StreamID: id})
		b = append(b, 0x88) // :status 200
		for range 1000 {
			b = AppendFrameHeader(b, FrameHeader{Length: 5, Type: FrameContinuation, StreamID: id})
			b = append(b, 0x40, 1, 'x', 1, 'y')
		}
		return b
	}
	d := serverDriver(t, Config{MaxHeaderListSize: bound})
	d.in.Write(flood(1))
	d.pump()
	d.wantGoAway(ErrCodeEnhanceYourCalm, GuardContinuation)
	if f := d.c.Counters().Frames; f != 2+1+DefaultMaxContinuations+1 {
		t.Fatalf("consumer side: read %d frames", f)
	}
	id, err = p.cli.OpenStream()
	p.must(err)
	b, err = p.cli.AppendHeaders(nil, id, request("/s/m"), true)
	p.must(err)
	p.toSrv(b)
	before := p.cli.Counters().Frames
	if _, err := readAll(t, p.cli, p.now, flood(id)); err != errTooManyContinuals {
		t.Fatalf("provider side: %v, want %v", err, errTooManyContinuals)
	}
	if f := p.cli.Counters().Frames - before; f != 1+DefaultMaxContinuations+1 {
		t.Fatalf("provider side: read %d frames of the flood", f)
	}
	if g := p.cli.Counters().Guards[GuardContinuation]; g != 1 {
		t.Fatalf("provider side: guard counted %d times", g)
	}
}
