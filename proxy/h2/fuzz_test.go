package h2

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

func seedFrames(f *testing.F) {
	for _, tc := range frameCases {
		f.Add(tc.frame, uint32(0))
		f.Add(tc.frame, uint32(5))
	}
}

func FuzzSplitCheckFrame(f *testing.F) {
	seedFrames(f)
	f.Fuzz(func(t *testing.T, buf []byte, maxFrame uint32) {
		h, n, err := Split(buf, maxFrame)
		if err != nil || n == 0 {
			if n != 0 {
				t.Fatalf("n = %d with %v", n, err)
			}
			return
		}
		if n != h.FrameLen() || n > len(buf) {
			t.Fatalf("n = %d, frame %d, buf %d", n, h.FrameLen(), len(buf))
		}
		if buf[5]&0x80 == 0 && !bytes.Equal(AppendFrameHeader(nil, h), buf[:FrameHeaderLen]) {
			t.Fatalf("header does not round-trip")
		}
		payload := buf[FrameHeaderLen:n]
		if CheckFrame(h, payload) != nil {
			return
		}
		// What CheckFrame accepts, the accessors read without panicking and within the payload.
		switch h.Type {
		case FrameData:
			d, err := DataPayload(h, payload)
			if err != nil || len(d) > len(payload) {
				t.Fatal("data payload")
			}
		case FrameHeaders, FrameContinuation:
			if frag, err := HeaderBlockFragment(h, payload); err != nil || len(frag) > len(payload) {
				t.Fatal("fragment")
			}
		case FrameSettings:
			s := DefaultSettings()
			if err := s.Apply(payload); err != nil {
				t.Fatalf("checked SETTINGS do not apply: %v", err)
			}
		case FrameGoAway:
			_ = ParseGoAway(payload)
		}
	})
}

// FuzzConnServer feeds arbitrary bytes after a valid handshake to a consumer-side Conn. It must never panic;
// everything it writes must be frames x/net reads; a connection error must leave a GOAWAY as the last frame;
// no stream beyond the concurrency limit is ever open; every event names a stream the Conn tracked.
func FuzzConnServer(f *testing.F) {
	var b bytes.Buffer
	fr := http2.NewFramer(&b, nil)
	enc := hpack.NewEncoder(&b)
	_ = fr.WriteSettings()
	base := append([]byte(nil), b.Bytes()...)
	f.Add(base)
	for _, tc := range frameCases {
		f.Add(append(append([]byte(nil), base...), tc.frame...))
	}
	b.Reset()
	var hb bytes.Buffer
	enc = hpack.NewEncoder(&hb)
	for _, hf := range request("/s/m") {
		_ = enc.WriteField(hf)
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, true, []byte("hello"))
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteRSTStream(3, http2.ErrCodeCancel)
	f.Add(append(append([]byte(nil), base...), b.Bytes()...))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := NewConn(Config{MaxConcurrentStreams: 4, InitialWindowSize: 100, MaxHeaderListSize: 1024,
			Limits: Limits{ControlBurst: 20, ResetBurst: 20}})
		out := append([]byte(nil), c.Output()...)
		c.ClearOutput()
		buf := append([]byte(ClientPreface), in...)
		now := int64(1)
		var err error
		for len(buf) > 0 {
			var n int
			var ev Event
			n, ev, err = c.Read(now, buf)
			now += 1000
			if err != nil || n == 0 {
				break
			}
			if c.OpenStreams() > 4 {
				t.Fatalf("%d streams open", c.OpenStreams())
			}
			if ev.Kind == EventData {
				_ = c.Consumed(ev.Stream, len(ev.Data))
			}
			if ev.Kind == EventHeaders && !ev.Trailers {
				if !CheckRequestHeaders(ev.Fields) {
					t.Fatalf("malformed request delivered: %v", ev.Fields)
				}
				_, _ = c.AppendHeaders(nil, ev.Stream, ErrorTrailers(false, 14, "x"), true)
			}
			buf = buf[n:]
		}
		out = append(out, c.Output()...)
		rd := http2.NewFramer(nil, bytes.NewReader(out))
		var last http2.Frame
		for {
			fr, rerr := rd.ReadFrame()
			if errors.Is(rerr, io.EOF) {
				break
			}
			if rerr != nil {
				t.Fatalf("Conn wrote an unreadable frame: %v", rerr)
			}
			last = fr
		}
		if err != nil {
			if _, ok := last.(*http2.GoAwayFrame); !ok {
				t.Fatalf("connection error %v without a final GOAWAY (last %v)", err, last)
			}
		}
	})
}

// FuzzHeaderForward: any block the decoder accepts re-encodes statelessly to a block that a fresh decoder
// (and one with a full table) reads as the same list: forwarding never changes a header.
func FuzzHeaderForward(f *testing.F) {
	f.Add(AppendFields(nil, sampleFields))
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for _, hf := range sampleFields {
		_ = enc.WriteField(hf)
	}
	f.Add(b.Bytes())
	f.Add([]byte{0x3f, 0xe1, 0x1f, 0x82})
	f.Fuzz(func(t *testing.T, block []byte) {
		d := NewHeaderDecoder(4096)
		fields, over, err := d.Decode(block)
		if err != nil || over {
			return
		}
		re := AppendFields(nil, fields)
		got, err := hpack.NewDecoder(0, nil).DecodeFull(re)
		if err != nil {
			t.Fatalf("re-encoded block does not decode: %v", err)
		}
		if len(got) != len(fields) || (len(got) > 0 && !reflect.DeepEqual(got, fields)) {
			t.Fatalf("forwarded %v as %v", fields, got)
		}
	})
}

// FuzzRestoreConn: RestoreConn takes any JSON state without panicking, and a Conn it accepts reads any
// bytes, and serves its owner's calls on every stream, without panicking either (it validated what the
// state machine relies on), and still exports a state it accepts again.
func FuzzRestoreConn(f *testing.F) {
	for _, st := range fuzzStates(f) {
		js, err := json.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(js, []byte(nil))
		f.Add(js, AppendWindowUpdate(dataFrame(1, true, 10), 3, 100))
		f.Add(js, headersFrame(41, true, request("/s/m")))
	}
	f.Add([]byte(`{"role":1,"phase":"active","acked":true,"next_own":3,"streams":[{"id":1,"state":1,"send":-5}]}`), []byte{0, 0, 0, 1, 0, 0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, js, in []byte) {
		var st ConnState
		if json.Unmarshal(js, &st) != nil {
			return
		}
		c, err := RestoreConn(Config{Role: st.Role, Limits: Limits{ControlBurst: 20, ResetBurst: 20}}, st)
		if err != nil {
			return
		}
		ids := []uint32{0, 1, 2}
		for _, s := range st.Streams {
			ids = append(ids, s.ID)
		}
		for _, id := range ids {
			_ = c.SendWindow(id)
			_, _, _ = c.AppendData(1, nil, id, []byte("answer"), true)
			_, _ = c.AppendHeaders(nil, id, ErrorTrailers(false, 14, "x"), true)
		}
		if again, err := RestoreConn(Config{Role: st.Role}, mustExport(t, c)); err != nil || again == nil {
			t.Fatalf("a restored Conn exports a state RestoreConn refuses: %v", err)
		}
		c.ClearOutput()
		now := int64(1)
		for len(in) > 0 {
			n, ev, err := c.Read(now, in)
			now += 1000
			if err != nil || n == 0 {
				break
			}
			if ev.Kind == EventData {
				_ = c.Consumed(ev.Stream, len(ev.Data))
			}
			in = in[n:]
		}
		_, _, _ = c.CheckStalls(now + int64(DefaultLimits().StallTimeout))
	})
}

// fuzzStates are the states at rest the differential tests build, as seeds.
func fuzzStates(f *testing.F) []ConnState {
	var sts []ConnState
	for _, c := range []*Conn{serverAtRest(f).srv, clientAtRest(f, false).cli, clientAtRest(f, true).cli} {
		st, err := c.Export()
		if err != nil {
			f.Fatal(err)
		}
		sts = append(sts, st)
	}
	return sts
}

func mustExport(t *testing.T, c *Conn) ConnState {
	t.Helper()
	st, err := c.Export()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
