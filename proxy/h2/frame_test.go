package h2

import (
	"bytes"
	"errors"
	"testing"
)

// frame builds a raw frame; the payload is taken as given (lengths may lie: see rawFrame).
func frame(t FrameType, f Flags, stream uint32, payload ...byte) []byte {
	return append(AppendFrameHeader(nil, FrameHeader{Length: uint32(len(payload)), Type: t, Flags: f, StreamID: stream}), payload...)
}

// frameCases are whole frames with the verdict of CheckFrame: "" (valid), "conn:<CODE>" or "stream:<CODE>".
// They seed the fuzz corpus too.
var frameCases = []struct {
	name  string
	frame []byte
	want  string
}{
	{"data", frame(FrameData, FlagEndStream, 1, 'h', 'i'), ""},
	{"data empty", frame(FrameData, 0, 1), ""},
	{"data stream 0", frame(FrameData, 0, 0, 'x'), "conn:PROTOCOL_ERROR"},
	{"data padded", frame(FrameData, FlagPadded, 1, 2, 'a', 0, 0), ""},
	{"data padded all padding", frame(FrameData, FlagPadded, 1, 3, 0, 0, 0), ""},
	{"data pad too long", frame(FrameData, FlagPadded, 1, 3, 'a', 0), "conn:PROTOCOL_ERROR"},
	{"data padded empty", frame(FrameData, FlagPadded, 1), "conn:PROTOCOL_ERROR"},
	{"headers", frame(FrameHeaders, FlagEndHeaders, 1, 0x82), ""},
	{"headers stream 0", frame(FrameHeaders, FlagEndHeaders, 0, 0x82), "conn:PROTOCOL_ERROR"},
	{"headers priority", frame(FrameHeaders, FlagEndHeaders|FlagPriority, 3, 0, 0, 0, 1, 16, 0x82), ""},
	{"headers priority short", frame(FrameHeaders, FlagPriority, 3, 0, 0, 0), "conn:FRAME_SIZE_ERROR"},
	{"headers padded+priority", frame(FrameHeaders, FlagPadded|FlagPriority, 3, 1, 0, 0, 0, 1, 16, 0x82, 0), ""},
	{"headers pad over block", frame(FrameHeaders, FlagPadded|FlagPriority, 3, 2, 0, 0, 0, 1, 16, 0x82), "conn:PROTOCOL_ERROR"},
	{"headers padded empty", frame(FrameHeaders, FlagPadded, 3), "conn:FRAME_SIZE_ERROR"},
	{"priority", frame(FramePriority, 0, 5, 0, 0, 0, 1, 16), ""},
	{"priority stream 0", frame(FramePriority, 0, 0, 0, 0, 0, 1, 16), "conn:PROTOCOL_ERROR"},
	{"priority length", frame(FramePriority, 0, 5, 0, 0, 0, 1), "stream:FRAME_SIZE_ERROR"},
	{"rst", frame(FrameRSTStream, 0, 1, 0, 0, 0, 8), ""},
	{"rst stream 0", frame(FrameRSTStream, 0, 0, 0, 0, 0, 8), "conn:PROTOCOL_ERROR"},
	{"rst length", frame(FrameRSTStream, 0, 1, 0, 0, 8), "conn:FRAME_SIZE_ERROR"},
	{"settings", frame(FrameSettings, 0, 0, 0, 1, 0, 0, 0, 0), ""},
	{"settings empty", frame(FrameSettings, 0, 0), ""},
	{"settings ack", frame(FrameSettings, FlagAck, 0), ""},
	{"settings ack payload", frame(FrameSettings, FlagAck, 0, 0, 1, 0, 0, 0, 0), "conn:FRAME_SIZE_ERROR"},
	{"settings length", frame(FrameSettings, 0, 0, 0, 1, 0, 0, 0), "conn:FRAME_SIZE_ERROR"},
	{"settings stream", frame(FrameSettings, 0, 1), "conn:PROTOCOL_ERROR"},
	{"settings push 2", frame(FrameSettings, 0, 0, 0, 2, 0, 0, 0, 2), "conn:PROTOCOL_ERROR"},
	{"settings window 2^31", frame(FrameSettings, 0, 0, 0, 4, 0x80, 0, 0, 0), "conn:FLOW_CONTROL_ERROR"},
	{"settings frame size low", frame(FrameSettings, 0, 0, 0, 5, 0, 0, 0x3f, 0xff), "conn:PROTOCOL_ERROR"},
	{"settings frame size high", frame(FrameSettings, 0, 0, 0, 5, 1, 0, 0, 0), "conn:PROTOCOL_ERROR"},
	{"settings unknown id", frame(FrameSettings, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff), ""},
	{"push promise", frame(FramePushPromise, FlagEndHeaders, 1, 0, 0, 0, 2, 0x82), "conn:PROTOCOL_ERROR"},
	{"ping", frame(FramePing, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8), ""},
	{"ping stream", frame(FramePing, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8), "conn:PROTOCOL_ERROR"},
	{"ping length", frame(FramePing, 0, 0, 1, 2, 3, 4, 5, 6, 7), "conn:FRAME_SIZE_ERROR"},
	{"goaway", frame(FrameGoAway, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 'b', 'y', 'e'), ""},
	{"goaway short", frame(FrameGoAway, 0, 0, 0, 0, 0, 1, 0, 0, 0), "conn:FRAME_SIZE_ERROR"},
	{"goaway stream", frame(FrameGoAway, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0), "conn:PROTOCOL_ERROR"},
	{"window", frame(FrameWindowUpdate, 0, 0, 0, 0, 1, 0), ""},
	{"window stream", frame(FrameWindowUpdate, 0, 7, 0x80, 0, 1, 0), ""},
	{"window 0 conn", frame(FrameWindowUpdate, 0, 0, 0, 0, 0, 0), "conn:PROTOCOL_ERROR"},
	{"window 0 stream", frame(FrameWindowUpdate, 0, 7, 0x80, 0, 0, 0), "stream:PROTOCOL_ERROR"},
	{"window length", frame(FrameWindowUpdate, 0, 7, 0, 0, 1), "conn:FRAME_SIZE_ERROR"},
	{"continuation", frame(FrameContinuation, FlagEndHeaders, 1, 0x82), ""},
	{"continuation stream 0", frame(FrameContinuation, FlagEndHeaders, 0, 0x82), "conn:PROTOCOL_ERROR"},
	{"unknown type", frame(0xfa, 0xff, 0, 1, 2, 3), ""},
}

func verdict(err error) string {
	var ce *ConnError
	var se *StreamError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ce):
		return "conn:" + ce.Code.String()
	case errors.As(err, &se):
		return "stream:" + se.Code.String()
	}
	return "other:" + err.Error()
}

func TestCheckFrame(t *testing.T) {
	for _, tc := range frameCases {
		h, n, err := Split(tc.frame, 0)
		if err != nil || n != len(tc.frame) {
			t.Fatalf("%s: Split = %d, %v", tc.name, n, err)
		}
		if got := verdict(CheckFrame(h, tc.frame[FrameHeaderLen:n])); got != tc.want {
			t.Errorf("%s: CheckFrame = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFrameHeaderRoundTrip(t *testing.T) {
	h := FrameHeader{Length: 0xabcdef, Type: FrameHeaders, Flags: FlagEndHeaders | FlagPadded, StreamID: 0x7fffffff}
	b := AppendFrameHeader(nil, h)
	if len(b) != FrameHeaderLen {
		t.Fatalf("len %d", len(b))
	}
	got, ok := ParseFrameHeader(b)
	if !ok || got != h {
		t.Fatalf("got %+v %v", got, ok)
	}
	// The reserved bit is ignored on receipt (§4.1).
	b[5] |= 0x80
	if got, _ := ParseFrameHeader(b); got.StreamID != 0x7fffffff {
		t.Fatalf("reserved bit kept: %#x", got.StreamID)
	}
	if _, ok := ParseFrameHeader(b[:8]); ok {
		t.Fatal("8 bytes parsed")
	}
}

func TestSplit(t *testing.T) {
	f := frame(FrameData, 0, 1, make([]byte, 100)...)
	for i := 0; i < len(f); i++ {
		if _, n, err := Split(f[:i], 0); n != 0 || err != nil {
			t.Fatalf("prefix %d: n=%d err=%v", i, n, err)
		}
	}
	if _, n, err := Split(append(f, 1, 2, 3), 0); n != len(f) || err != nil {
		t.Fatalf("n=%d err=%v", n, err)
	}
	big := AppendFrameHeader(nil, FrameHeader{Length: DefaultMaxFrameSize + 1, Type: FrameData, StreamID: 1})
	if _, _, err := Split(big, 0); verdict(err) != "conn:FRAME_SIZE_ERROR" {
		t.Fatalf("oversize: %v", err)
	}
	if _, _, err := Split(big, DefaultMaxFrameSize+1); err != nil {
		t.Fatalf("with a larger max: %v", err)
	}
}

func TestCheckPreface(t *testing.T) {
	for i := 0; i < len(ClientPreface); i++ {
		if n, err := CheckPreface([]byte(ClientPreface[:i])); n != 0 || err != nil {
			t.Fatalf("prefix %d: %d %v", i, n, err)
		}
	}
	if n, err := CheckPreface([]byte(ClientPreface + "xyz")); n != len(ClientPreface) || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := CheckPreface([]byte("PRI * HTTP/1.1\r\n")); verdict(err) != "conn:PROTOCOL_ERROR" {
		t.Fatalf("bad preface: %v", err)
	}
	if _, err := CheckPreface([]byte("GET / HTTP/1.1\r\nUpgrade: h2c\r\n")); err != ErrHTTP1Upgrade {
		t.Fatalf("h1: %v", err)
	}
	if _, err := CheckPreface([]byte{0xda, 0xbb}); err == nil || err == ErrHTTP1Upgrade {
		t.Fatalf("dubbo magic: %v", err)
	}
}

func TestSettingsApply(t *testing.T) {
	s := DefaultSettings()
	payload := AppendSettings(nil,
		Setting{SettingHeaderTableSize, 0}, Setting{SettingEnablePush, 0}, Setting{SettingMaxConcurrentStreams, 7},
		Setting{SettingInitialWindowSize, 1 << 20}, Setting{SettingMaxFrameSize, 1 << 20},
		Setting{SettingMaxHeaderListSize, 8192}, Setting{SettingMaxConcurrentStreams, 9}, Setting{0x99, 5})[FrameHeaderLen:]
	if NumSettings(payload) != 8 || SettingAt(payload, 6) != (Setting{SettingMaxConcurrentStreams, 9}) {
		t.Fatalf("iteration: %d %v", NumSettings(payload), SettingAt(payload, 6))
	}
	if err := s.Apply(payload); err != nil {
		t.Fatal(err)
	}
	want := Settings{HeaderTableSize: 0, EnablePush: false, MaxConcurrentStreams: 9, InitialWindowSize: 1 << 20,
		MaxFrameSize: 1 << 20, MaxHeaderListSize: 8192}
	if s != want {
		t.Fatalf("got %+v", s)
	}
	before := s
	bad := AppendSettings(nil, Setting{SettingMaxConcurrentStreams, 1}, Setting{SettingMaxFrameSize, 100})[FrameHeaderLen:]
	if err := s.Apply(bad); verdict(err) != "conn:PROTOCOL_ERROR" || s != before {
		t.Fatalf("bad apply: %v, %+v", err, s)
	}
	if d := want.Diff(DefaultSettings()); len(d) != 6 {
		t.Fatalf("diff %v", d)
	}
}

func TestControlFrames(t *testing.T) {
	d := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	p := AppendPing(nil, true, d)
	h, _ := ParseFrameHeader(p)
	if h.Type != FramePing || !h.Flags.Has(FlagAck) || PingData(p[9:]) != d || CheckFrame(h, p[9:]) != nil {
		t.Fatalf("ping %x", p)
	}
	w := AppendWindowUpdate(nil, 5, 1000)
	if h, _ := ParseFrameHeader(w); h.StreamID != 5 || WindowIncrement(w[9:]) != 1000 {
		t.Fatalf("window %x", w)
	}
	r := AppendRSTStream(nil, 3, ErrCodeCancel)
	if RSTCode(r[9:]) != ErrCodeCancel {
		t.Fatalf("rst %x", r)
	}
	g := AppendGoAway(nil, 41, ErrCodeEnhanceYourCalm, "calm")
	gp := ParseGoAway(g[9:])
	if gp.LastStream != 41 || gp.Code != ErrCodeEnhanceYourCalm || string(gp.Debug) != "calm" {
		t.Fatalf("goaway %+v", gp)
	}
	if !bytes.Equal(AppendSettingsAck(nil), []byte{0, 0, 0, 4, 1, 0, 0, 0, 0}) {
		t.Fatal("settings ack")
	}
	if ErrCode(0x42).String() != "ERR_CODE_0x42" || FrameType(0xfa).String() != "UNKNOWN_0xfa" {
		t.Fatal("names")
	}
}
