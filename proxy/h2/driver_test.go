package h2

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// driver plays the peer of a Conn in memory: it writes frames with x/net's Framer and a real (indexing)
// HPACK encoder, feeds them to the Conn, keeps the events (copied), and reads the Conn's Output back with
// x/net's Framer, so both directions are checked by an independent implementation.
type driver struct {
	t      *testing.T
	c      *Conn
	now    int64
	in     bytes.Buffer // peer -> Conn, not yet read
	fr     *http2.Framer
	encBuf bytes.Buffer
	enc    *hpack.Encoder
	events []Event
	err    error
	out    bytes.Buffer // Conn -> peer, not yet parsed
	outFr  *http2.Framer
	dec    *hpack.Decoder
}

func newDriver(t *testing.T, cfg Config) *driver {
	t.Helper()
	d := &driver{t: t, c: NewConn(cfg), now: int64(time.Hour)}
	d.fr = http2.NewFramer(&d.in, nil)
	d.fr.AllowIllegalWrites = true
	d.enc = hpack.NewEncoder(&d.encBuf)
	d.outFr = http2.NewFramer(nil, &d.out)
	d.outFr.ReadMetaHeaders = nil
	d.dec = hpack.NewDecoder(4096, nil)
	d.out.Write(bytes.TrimPrefix(d.c.Output(), []byte(ClientPreface)))
	d.c.ClearOutput()
	return d
}

// serverDriver is a consumer-side Conn after the handshake: preface, the peer's SETTINGS, both ACKs.
func serverDriver(t *testing.T, cfg Config, peer ...http2.Setting) *driver {
	t.Helper()
	d := newDriver(t, cfg)
	d.in.WriteString(ClientPreface)
	d.must(d.fr.WriteSettings(peer...))
	d.pump()
	d.ackSettings()
	d.pump()
	if d.err != nil {
		t.Fatal(d.err)
	}
	d.outFrames()
	d.events = nil
	return d
}

// ackSettings acknowledges the Conn's SETTINGS the way an honest peer does: from now on its encoder
// honours SETTINGS_HEADER_TABLE_SIZE = 0.
func (d *driver) ackSettings() {
	d.must(d.fr.WriteSettingsAck())
	d.enc.SetMaxDynamicTableSize(0)
}

func (d *driver) must(err error) {
	d.t.Helper()
	if err != nil {
		d.t.Fatal(err)
	}
}

// pump feeds everything the peer wrote to the Conn and collects events and Output.
func (d *driver) pump() {
	d.t.Helper()
	buf := d.in.Bytes()
	for len(buf) > 0 && d.err == nil {
		n, ev, err := d.c.Read(d.now, buf)
		if err != nil {
			d.err = err
			break
		}
		if n == 0 {
			break
		}
		buf = buf[n:]
		if ev.Kind != EventNone {
			ev.Fields = append([]HeaderField(nil), ev.Fields...)
			ev.Data = append([]byte(nil), ev.Data...)
			d.events = append(d.events, ev)
		}
	}
	d.in.Next(d.in.Len() - len(buf))
	d.out.Write(d.c.Output())
	d.c.ClearOutput()
}

// headers writes a header block (one HEADERS frame) encoded by the peer's indexing encoder.
func (d *driver) headers(stream uint32, end bool, fields ...HeaderField) {
	d.t.Helper()
	d.encBuf.Reset()
	for _, f := range fields {
		d.must(d.enc.WriteField(f))
	}
	d.must(d.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: d.encBuf.Bytes(),
		EndStream: end, EndHeaders: true}))
}

func request(path string) []HeaderField {
	return []HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path},
		{Name: ":authority", Value: "provider"}, {Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
	}
}

// outFrame is a frame the Conn wrote, as x/net's Framer read it (copied: the Framer reuses its frames).
type outFrame struct {
	Type       http2.FrameType
	Stream     uint32
	EndStream  bool
	EndHeaders bool
	Ack        bool
	Data       []byte // DATA payload, or HEADERS block fragment
	Settings   map[http2.SettingID]uint32
	Ping       [8]byte
	Code       ErrCode // RST_STREAM, GOAWAY
	LastStream uint32
	Increment  uint32
}

// outFrames parses what the Conn wrote since the last call.
func (d *driver) outFrames() []outFrame {
	d.t.Helper()
	var fs []outFrame
	for {
		f, err := d.outFr.ReadFrame()
		if errors.Is(err, io.EOF) {
			return fs
		}
		if err != nil {
			d.t.Fatalf("Conn wrote a frame x/net cannot read: %v", err)
		}
		o := outFrame{Type: f.Header().Type, Stream: f.Header().StreamID}
		switch f := f.(type) {
		case *http2.DataFrame:
			o.Data, o.EndStream = append([]byte(nil), f.Data()...), f.StreamEnded()
		case *http2.HeadersFrame:
			o.Data, o.EndStream, o.EndHeaders = append([]byte(nil), f.HeaderBlockFragment()...), f.StreamEnded(), f.HeadersEnded()
		case *http2.SettingsFrame:
			o.Ack, o.Settings = f.IsAck(), map[http2.SettingID]uint32{}
			_ = f.ForeachSetting(func(s http2.Setting) error { o.Settings[s.ID] = s.Val; return nil })
		case *http2.PingFrame:
			o.Ack, o.Ping = f.IsAck(), f.Data
		case *http2.RSTStreamFrame:
			o.Code = ErrCode(f.ErrCode)
		case *http2.GoAwayFrame:
			o.Code, o.LastStream = ErrCode(f.ErrCode), f.LastStreamID
		case *http2.WindowUpdateFrame:
			o.Increment = f.Increment
		}
		fs = append(fs, o)
	}
}

func goAwayOf(fs []outFrame) *outFrame {
	for i := range fs {
		if fs[i].Type == http2.FrameGoAway {
			return &fs[i]
		}
	}
	return nil
}

func rstOf(fs []outFrame, stream uint32) *outFrame {
	for i := range fs {
		if fs[i].Type == http2.FrameRSTStream && fs[i].Stream == stream {
			return &fs[i]
		}
	}
	return nil
}

// wantGoAway asserts the connection ended with a GOAWAY of code and the guard was counted.
func (d *driver) wantGoAway(code ErrCode, g Guard) {
	d.t.Helper()
	var ce *ConnError
	if !errors.As(d.err, &ce) || ce.Code != code {
		d.t.Fatalf("connection error %v, want %v", d.err, code)
	}
	ga := goAwayOf(d.outFrames())
	if ga == nil || ga.Code != code {
		d.t.Fatalf("GOAWAY %v, want one with %v", ga, code)
	}
	if g < NumGuards && d.c.Counters().Guards[g] != 1 {
		d.t.Fatalf("guard %v counted %d times", g, d.c.Counters().Guards[g])
	}
}

// wantRST asserts the Conn reset stream with code, counted under g, and the connection lives on.
func (d *driver) wantRST(stream uint32, code ErrCode, g Guard) {
	d.t.Helper()
	if d.err != nil {
		d.t.Fatalf("connection ended: %v", d.err)
	}
	r := rstOf(d.outFrames(), stream)
	if r == nil || r.Code != code {
		d.t.Fatalf("RST_STREAM %v on stream %d, want %v", r, stream, code)
	}
	if g < NumGuards && d.c.Counters().Guards[g] == 0 {
		d.t.Fatalf("guard %v not counted", g)
	}
}

// decodeHeaders decodes a HEADERS frame the Conn wrote (one frame, END_HEADERS).
func (d *driver) decodeHeaders(f outFrame) []HeaderField {
	d.t.Helper()
	if f.Type != http2.FrameHeaders || !f.EndHeaders {
		d.t.Fatalf("not a one-frame header block: %+v", f)
	}
	fs, err := d.dec.DecodeFull(f.Data)
	if err != nil {
		d.t.Fatal(err)
	}
	return fs
}

// requestWithHead has the peer open stream id with a request (END_STREAM when end) and the Conn answer it with
// a response head (:status 200), so the stream is open for this side's DATA.
func (d *driver) requestWithHead(id uint32, end bool) {
	d.t.Helper()
	d.headers(id, end, request("/s/m")...)
	d.pump()
	if _, err := d.c.AppendHeaders(nil, id, []HeaderField{{Name: ":status", Value: "200"}}, false); err != nil {
		d.t.Fatal(err)
	}
}

// pair is a client Conn and a server Conn talking to each other in memory, both owners played by the test:
// what one side puts in Output the other reads, and what an owner writes itself (AppendHeaders,
// AppendData) or a frame the test builds by hand is delivered after it, in order.
type pair struct {
	t            testing.TB
	now          int64
	cli, srv     *Conn
	cliEv, srvEv []Event
}

func newPair(t testing.TB, cli, srv Config) *pair {
	t.Helper()
	cli.Role, srv.Role = RoleClient, RoleServer
	p := &pair{t: t, now: int64(time.Hour), cli: NewConn(cli), srv: NewConn(srv)}
	p.flush()
	return p
}

// toSrv delivers the client's Output and then b (what the client's owner wrote) to the server, and lets
// both sides answer until neither has more to say.
func (p *pair) toSrv(b []byte) {
	p.t.Helper()
	p.deliver(p.cli, p.srv, &p.srvEv, b)
	p.flush()
}

// toCli is toSrv the other way.
func (p *pair) toCli(b []byte) {
	p.t.Helper()
	p.deliver(p.srv, p.cli, &p.cliEv, b)
	p.flush()
}

func (p *pair) deliver(from, to *Conn, evs *[]Event, b []byte) {
	p.t.Helper()
	in := append(append([]byte(nil), from.Output()...), b...)
	from.ClearOutput()
	ev, err := readAll(p.t, to, p.now, in)
	if err != nil {
		p.t.Fatal(err)
	}
	*evs = append(*evs, ev...)
}

// flush moves each side's Output to the other until both are empty (bounded: an answer never needs an
// answer of its own more than a few times over).
func (p *pair) flush() {
	p.t.Helper()
	for range 8 {
		if len(p.cli.Output())+len(p.srv.Output()) == 0 {
			return
		}
		p.deliver(p.cli, p.srv, &p.srvEv, nil)
		p.deliver(p.srv, p.cli, &p.cliEv, nil)
	}
	p.t.Fatal("the two sides never went quiet")
}

// readAll reads the whole of in into c (it must hold whole frames) and returns the events, copied, and
// the error that ended the connection, if any.
func readAll(t testing.TB, c *Conn, now int64, in []byte) ([]Event, error) {
	t.Helper()
	var evs []Event
	for len(in) > 0 {
		n, ev, err := c.Read(now, in)
		if ev.Kind != EventNone {
			ev.Fields = append([]HeaderField(nil), ev.Fields...)
			ev.Data = append([]byte(nil), ev.Data...)
			evs = append(evs, ev)
		}
		if err != nil {
			return evs, err
		}
		if n == 0 {
			t.Fatalf("%d bytes left that are not a whole frame", len(in))
		}
		in = in[n:]
	}
	return evs, nil
}

// Frames as a peer writes them, built by hand: what a well-behaved Conn would not send is sendable too.
func dataFrame(id uint32, end bool, n int) []byte {
	var f Flags
	if end {
		f = FlagEndStream
	}
	b := AppendFrameHeader(nil, FrameHeader{Length: uint32(n), Type: FrameData, Flags: f, StreamID: id})
	return append(b, bytes.Repeat([]byte{'d'}, n)...)
}

func headersFrame(id uint32, end bool, fields []HeaderField) []byte {
	return AppendHeaderBlock(nil, id, AppendFields(nil, fields), end, 0)
}
