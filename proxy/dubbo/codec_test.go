package dubbo

import (
	"bytes"
	"errors"
	"testing"
)

// hdr builds a header literal: magic, flags, status, 8-byte id, 4-byte length.
func hdr(flags, status byte, id [8]byte, length [4]byte) []byte {
	b := []byte{0xda, 0xbb, flags, status}
	b = append(b, id[:]...)
	return append(b, length[:]...)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

var (
	id7   = [8]byte{0, 0, 0, 0, 0, 0, 0, 7}
	idBig = [8]byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}
	idNeg = [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe} // -2
)

// frameCase is one frame as seen on the wire (dubbo-protocol.md). The table also
// seeds the fuzz corpora.
type frameCase struct {
	name     string
	frame    []byte
	maxFrame int
	err      error
	kind     Kind
	id       int64
	status   byte
	bodyLen  int32
	event    byte // EventBody of the body
}

var frameCases = []frameCase{
	{
		name:  "heartbeat request",
		frame: []byte{0xda, 0xbb, 0xe2, 0x00, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1, 0x4e},
		kind:  KindEventTwoWay, id: 7, bodyLen: 1,
	},
	{
		name:  "heartbeat reply java",
		frame: []byte{0xda, 0xbb, 0x22, 0x14, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1, 0x4e},
		kind:  KindEventResponse, id: 7, status: StatusOK, bodyLen: 1,
	},
	{
		name:  "heartbeat reply dubbo-go",
		frame: []byte{0xda, 0xbb, 0x22, 0x14, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 2, 0x4e, 0x4e},
		kind:  KindEventResponse, id: 7, status: StatusOK, bodyLen: 2,
	},
	{
		name:  "readonly event",
		frame: []byte{0xda, 0xbb, 0xa2, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 2, 0x01, 0x52},
		kind:  KindEventOneWay, id: 0x0102030405060708, bodyLen: 2, event: 'R',
	},
	{
		name:  "writeable event",
		frame: []byte{0xda, 0xbb, 0xa2, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 2, 0x01, 0x57},
		kind:  KindEventOneWay, id: 0x0102030405060708, bodyLen: 2, event: 'W',
	},
	{
		name:  "one-way request",
		frame: cat(hdr(0x82, 0, idNeg, [4]byte{0, 0, 0, 6}), []byte{0x05, '2', '.', '0', '.', '2'}),
		kind:  KindOneWay, id: -2, bodyLen: 6,
	},
	{
		name:  "two-way request",
		frame: cat(hdr(0xc2, 0, idBig, [4]byte{0, 0, 0, 6}), []byte{0x05, '2', '.', '0', '.', '2'}),
		kind:  KindRequest, id: 0x0102030405060708, bodyLen: 6,
	},
	{
		name:  "ok response",
		frame: cat(hdr(0x02, 0x14, id7, [4]byte{0, 0, 0, 3}), []byte{0x91, 0x01, 'x'}),
		kind:  KindResponse, id: 7, status: StatusOK, bodyLen: 3,
	},
	{
		name:  "error response with message",
		frame: cat(hdr(0x02, 0x46, id7, [4]byte{0, 0, 0, 5}), []byte{0x04, 'b', 'o', 'o', 'm'}),
		kind:  KindResponse, id: 7, status: StatusServiceError, bodyLen: 5,
	},
	{
		name:  "empty body at exactly the cap",
		frame: hdr(0x02, 0x14, id7, [4]byte{0, 0, 0, 0}), maxFrame: HeaderLen,
		kind: KindResponse, id: 7, status: StatusOK,
	},
	{
		name:  "dubbo-go cap exactly",
		frame: hdr(0xc2, 0, id7, [4]byte{0x00, 0x01, 0x8f, 0xf0}), maxFrame: 102400, // 102384 + 16
		kind: KindRequest, id: 7, bodyLen: 102384,
	},
	{
		name:  "dubbo-go cap plus one",
		frame: hdr(0xc2, 0, id7, [4]byte{0x00, 0x01, 0x8f, 0xf1}), maxFrame: 102400,
		err: ErrTooLarge, kind: KindRequest, id: 7, bodyLen: 102385,
	},
	{
		name:  "oversize with default cap",
		frame: hdr(0xc2, 0, id7, [4]byte{0x00, 0x80, 0x00, 0x00}), // 8 MiB body + header
		err:   ErrTooLarge, kind: KindRequest, id: 7, bodyLen: 8 << 20,
	},
	{
		name:  "max int32 body",
		frame: hdr(0xc2, 0, id7, [4]byte{0x7f, 0xff, 0xff, 0xff}), maxFrame: -1,
		err: ErrTooLarge, kind: KindRequest, id: 7, bodyLen: 0x7fffffff,
	},
	{
		name:  "negative length",
		frame: hdr(0xc2, 0, id7, [4]byte{0xff, 0xff, 0xff, 0xff}),
		err:   ErrNegativeLen, kind: KindRequest, id: 7, bodyLen: -1,
	},
	{
		name:  "bad magic",
		frame: []byte{0xda, 0xbc, 0xe2, 0x00, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 1, 0x4e},
		err:   ErrBadMagic,
	},
	{
		name:  "telnet line",
		frame: []byte("status -l\r\nxxxxxxxxxxxxxxxx"),
		err:   ErrBadMagic,
	},
	{
		name:  "short header",
		frame: []byte{0xda, 0xbb, 0xe2, 0x00, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0},
		err:   ErrShortHeader,
	},
	{name: "empty", frame: nil, err: ErrShortHeader},
}

func TestParseHeader(t *testing.T) {
	for _, tc := range frameCases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ParseHeader(tc.frame, tc.maxFrame)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.err == ErrShortHeader || tc.err == ErrBadMagic {
				if h != (Header{}) {
					t.Fatalf("header = %+v, want zero on %v", h, err)
				}
				return
			}
			if got := h.Kind(); got != tc.kind {
				t.Errorf("kind = %v, want %v", got, tc.kind)
			}
			if h.ID != tc.id || h.Status != tc.status || h.BodyLen != tc.bodyLen {
				t.Errorf("header = %+v, want id %d status %d len %d", h, tc.id, tc.status, tc.bodyLen)
			}
			if h.Serial() != SerialHessian2 {
				t.Errorf("serial = %d, want %d", h.Serial(), SerialHessian2)
			}
			if tc.err != nil {
				return
			}
			if h.FrameLen() != len(tc.frame) && len(tc.frame) != HeaderLen {
				t.Errorf("FrameLen = %d, frame has %d bytes", h.FrameLen(), len(tc.frame))
			}
			if got := AppendHeader(nil, h); !bytes.Equal(got, tc.frame[:HeaderLen]) {
				t.Errorf("AppendHeader = % x, want % x", got, tc.frame[:HeaderLen])
			}
			if h.FrameLen() == len(tc.frame) {
				if got := EventBody(tc.frame[HeaderLen:]); got != tc.event {
					t.Errorf("EventBody = %q, want %q", got, tc.event)
				}
			}
		})
	}
}

func TestKindFlags(t *testing.T) {
	tests := []struct {
		flags byte
		want  Kind
	}{
		{0x80, KindOneWay},
		{0xc0, KindRequest},
		{0xa0, KindEventOneWay},
		{0xe0, KindEventTwoWay},
		{0x00, KindResponse},
		{0x40, KindResponse}, // two-way bit of a response is ignored, as Java does
		{0x20, KindEventResponse},
		{0x60, KindEventResponse},
	}
	for _, tc := range tests {
		for serial := byte(0); serial <= SerialMask; serial++ {
			h := Header{Flags: tc.flags | serial}
			if got := h.Kind(); got != tc.want {
				t.Errorf("flags %#02x: kind = %v, want %v", h.Flags, got, tc.want)
			}
			if h.Serial() != serial {
				t.Errorf("flags %#02x: serial = %d, want %d", h.Flags, h.Serial(), serial)
			}
		}
	}
	if Kind(0).String() != "invalid" || KindEventTwoWay.String() != "event-two-way" {
		t.Errorf("Kind.String: %q %q", Kind(0), KindEventTwoWay)
	}
}

func TestEventBody(t *testing.T) {
	tests := []struct {
		body []byte
		want byte
	}{
		{[]byte{0x4e}, 0},
		{[]byte{0x4e, 0x4e}, 0},
		{[]byte{0x01, 'R'}, 'R'},
		{[]byte{0x01, 'W'}, 'W'},
		{[]byte{0x01, 'R', 'N'}, 'R'}, // trailing null as dubbo-go appends
		{[]byte{0x01, 'X'}, 0},
		{[]byte{0x02, 'R', 'O'}, 0},
		{[]byte{0x01}, 0},
		{nil, 0},
	}
	for _, tc := range tests {
		if got := EventBody(tc.body); got != tc.want {
			t.Errorf("EventBody(% x) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestBuilders(t *testing.T) {
	const id = 0x0102030405060708
	idb := idBig[:]
	tests := []struct {
		name string
		got  []byte
		want []byte
	}{
		{
			name: "heartbeat request",
			got:  AppendHeartbeatRequest(nil, id),
			want: cat([]byte{0xda, 0xbb, 0xe2, 0x00}, idb, []byte{0, 0, 0, 1, 0x4e}),
		},
		{
			name: "heartbeat reply hessian2",
			got:  AppendHeartbeatReply(nil, id, SerialHessian2),
			want: cat([]byte{0xda, 0xbb, 0x22, 0x14}, idb, []byte{0, 0, 0, 1, 0x4e}),
		},
		{
			name: "heartbeat reply keeps the request's serialization",
			got:  AppendHeartbeatReply(nil, id, 0xe6), // flags of a request with serial 6: only 6 survives
			want: cat([]byte{0xda, 0xbb, 0x26, 0x14}, idb, []byte{0, 0, 0, 1, 0x4e}),
		},
		{
			name: "readonly",
			got:  AppendReadonlyEvent(nil, id),
			want: cat([]byte{0xda, 0xbb, 0xa2, 0x00}, idb, []byte{0, 0, 0, 2, 0x01, 0x52}),
		},
		{
			name: "writeable",
			got:  AppendWriteableEvent(nil, id),
			want: cat([]byte{0xda, 0xbb, 0xa2, 0x00}, idb, []byte{0, 0, 0, 2, 0x01, 0x57}),
		},
		{
			name: "error response",
			got:  AppendErrorResponse(nil, id, SerialHessian2, StatusServiceError, "boom"),
			want: cat([]byte{0xda, 0xbb, 0x02, 0x46}, idb, []byte{0, 0, 0, 5, 0x04, 'b', 'o', 'o', 'm'}),
		},
		{
			name: "error response empty message",
			got:  AppendErrorResponse(nil, id, SerialHessian2, StatusServerError, ""),
			want: cat([]byte{0xda, 0xbb, 0x02, 0x50}, idb, []byte{0, 0, 0, 1, 0x00}),
		},
		{
			name: "value response",
			got:  AppendValueResponse(nil, id, SerialHessian2, "ok"),
			want: cat([]byte{0xda, 0xbb, 0x02, 0x14}, idb, []byte{0, 0, 0, 4, 0x91, 0x02, 'o', 'k'}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Equal(tc.got, tc.want) {
				t.Fatalf("got  % x\nwant % x", tc.got, tc.want)
			}
		})
	}
}

// TestBuildersAppend checks that every builder appends after existing bytes, leaves
// them alone and patches its own length field, not the buffer's first header.
func TestBuildersAppend(t *testing.T) {
	prefix := AppendHeartbeatRequest(nil, 1)
	long := string(bytes.Repeat([]byte("e"), 2000))
	builders := map[string]func([]byte) []byte{
		"heartbeat reply": func(b []byte) []byte { return AppendHeartbeatReply(b, 9, 2) },
		"heartbeat req":   func(b []byte) []byte { return AppendHeartbeatRequest(b, 9) },
		"readonly":        func(b []byte) []byte { return AppendReadonlyEvent(b, 9) },
		"writeable":       func(b []byte) []byte { return AppendWriteableEvent(b, 9) },
		"error":           func(b []byte) []byte { return AppendErrorResponse(b, 9, 2, StatusServerError, long) },
		"value":           func(b []byte) []byte { return AppendValueResponse(b, 9, 2, long) },
		"request":         func(b []byte) []byte { return AppendRequest(b, 9, true, "svc", "m", long) },
	}
	for name, build := range builders {
		t.Run(name, func(t *testing.T) {
			buf := build(append([]byte(nil), prefix...))
			if !bytes.Equal(buf[:len(prefix)], prefix) {
				t.Fatalf("prefix changed: % x", buf[:len(prefix)])
			}
			alone := build(nil)
			if !bytes.Equal(buf[len(prefix):], alone) {
				t.Fatalf("appended frame differs from a fresh one")
			}
			h, n, err := Split(alone, 0)
			if err != nil || n != len(alone) || h.ID != 9 {
				t.Fatalf("Split = %+v, %d, %v; frame has %d bytes", h, n, err, len(alone))
			}
		})
	}
}

func TestSetID(t *testing.T) {
	for _, id := range []int64{0, 1, -1, -2, 1 << 62, -1 << 63, 0x0102030405060708} {
		frame := AppendRequest(nil, 5, true, "svc", "m", "a")
		orig := append([]byte(nil), frame...)
		SetID(frame, id)
		h, err := ParseHeader(frame, 0)
		if err != nil || h.ID != id {
			t.Fatalf("SetID(%d): header %+v, err %v", id, h, err)
		}
		SetID(frame, 5)
		if !bytes.Equal(frame, orig) {
			t.Fatalf("SetID touched bytes outside the id")
		}
	}
}

func TestSplitWholeFrames(t *testing.T) {
	for _, tc := range frameCases {
		t.Run(tc.name, func(t *testing.T) {
			h, n, err := Split(tc.frame, tc.maxFrame)
			switch {
			case tc.err == ErrShortHeader:
				if err != nil || n != 0 {
					t.Fatalf("short buffer: n=%d err=%v, want 0, nil", n, err)
				}
			case tc.err != nil:
				if !errors.Is(err, tc.err) || n != 0 {
					t.Fatalf("n=%d err=%v, want 0, %v", n, err, tc.err)
				}
			case len(tc.frame) >= HeaderLen+int(tc.bodyLen):
				if err != nil || n != len(tc.frame) || h.ID != tc.id {
					t.Fatalf("n=%d err=%v id=%d, want %d, nil, %d", n, err, h.ID, len(tc.frame), tc.id)
				}
			default: // header-only literal of a large frame
				if err != nil || n != 0 || h.FrameLen() != HeaderLen+int(tc.bodyLen) {
					t.Fatalf("n=%d err=%v h=%+v, want 0, nil, full header", n, err, h)
				}
			}
		})
	}
}

func TestSplitEarlyBadMagic(t *testing.T) {
	for _, buf := range [][]byte{{0x00}, {0xda, 0x00}, {0xbb}, []byte("ls\r\n")} {
		if _, n, err := Split(buf, 0); !errors.Is(err, ErrBadMagic) || n != 0 {
			t.Errorf("Split(% x) = %d, %v, want 0, ErrBadMagic", buf, n, err)
		}
	}
	for _, buf := range [][]byte{nil, {0xda}, {0xda, 0xbb}, {0xda, 0xbb, 0xe2}} {
		if _, n, err := Split(buf, 0); err != nil || n != 0 {
			t.Errorf("Split(% x) = %d, %v, want 0, nil", buf, n, err)
		}
	}
}

// TestSplitStream feeds a stream of mixed frames in every chunk size from 1 byte up
// and checks that exactly the original frames come out, in order.
func TestSplitStream(t *testing.T) {
	frames := [][]byte{
		AppendHeartbeatRequest(nil, 1),
		AppendRequest(nil, 2, true, "org.example.Greeter", "sayHello", "world"),
		AppendErrorResponse(nil, 3, 2, StatusServiceNotFound, string(bytes.Repeat([]byte("x"), 3000))),
		AppendReadonlyEvent(nil, 4),
		{0xda, 0xbb, 0x22, 0x14, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 2, 0x4e, 0x4e},
		AppendRequest(nil, 6, false, "s", "m", ""),
		AppendHeartbeatReply(nil, 7, 2),
	}
	stream := cat(frames...)
	for _, chunk := range []int{1, 2, 3, 7, 15, 16, 17, 100, 1000, len(stream)} {
		var got [][]byte
		var buf []byte
		for off := 0; off < len(stream); off += chunk {
			buf = append(buf, stream[off:min(off+chunk, len(stream))]...)
			for {
				h, n, err := Split(buf, 0)
				if err != nil {
					t.Fatalf("chunk %d: Split error %v", chunk, err)
				}
				if n == 0 {
					if len(buf) >= HeaderLen && len(buf) >= h.FrameLen() {
						t.Fatalf("chunk %d: n=0 with whole frame buffered", chunk)
					}
					break
				}
				if n > len(buf) || n != h.FrameLen() {
					t.Fatalf("chunk %d: n=%d, len(buf)=%d, FrameLen=%d", chunk, n, len(buf), h.FrameLen())
				}
				got = append(got, append([]byte(nil), buf[:n]...))
				buf = buf[n:]
			}
		}
		if len(buf) != 0 {
			t.Fatalf("chunk %d: %d bytes left over", chunk, len(buf))
		}
		if len(got) != len(frames) {
			t.Fatalf("chunk %d: %d frames, want %d", chunk, len(got), len(frames))
		}
		for i := range frames {
			if !bytes.Equal(got[i], frames[i]) {
				t.Fatalf("chunk %d: frame %d differs", chunk, i)
			}
		}
	}
}

// TestSplitEveryPrefix checks every strict prefix of a frame asks for more bytes.
func TestSplitEveryPrefix(t *testing.T) {
	frame := AppendRequest(nil, 42, true, "org.example.Greeter", "sayHello", "world")
	for i := 0; i < len(frame); i++ {
		h, n, err := Split(frame[:i], 0)
		if err != nil || n != 0 {
			t.Fatalf("prefix %d: n=%d err=%v, want 0, nil", i, n, err)
		}
		if i >= HeaderLen && h.FrameLen() != len(frame) {
			t.Fatalf("prefix %d: FrameLen %d, want %d", i, h.FrameLen(), len(frame))
		}
	}
	if _, n, err := Split(frame, len(frame)-1); !errors.Is(err, ErrTooLarge) || n != 0 {
		t.Fatalf("cap one below the frame: n=%d err=%v, want ErrTooLarge", n, err)
	}
}

// TestHotPathsDoNotAllocate proves the per-frame paths allocate nothing.
func TestHotPathsDoNotAllocate(t *testing.T) {
	frame := AppendHeartbeatRequest(nil, 1)
	buf := make([]byte, 0, 4096)
	msg := "provider connection lost: org.example.Greeter"
	tests := []struct {
		name string
		fn   func()
	}{
		{"ParseHeader", func() { _, _ = ParseHeader(frame, 0) }},
		{"Split", func() { _, _, _ = Split(frame, 0) }},
		{"SetID", func() { SetID(frame, 99) }},
		{"Kind", func() { _ = Header{Flags: frame[2]}.Kind() }},
		{"EventBody", func() { _ = EventBody(frame[HeaderLen:]) }},
		{"AppendHeartbeatReply", func() { buf = AppendHeartbeatReply(buf[:0], 1, 2) }},
		{"AppendHeartbeatRequest", func() { buf = AppendHeartbeatRequest(buf[:0], 1) }},
		{"AppendReadonlyEvent", func() { buf = AppendReadonlyEvent(buf[:0], 1) }},
		{"AppendErrorResponse", func() { buf = AppendErrorResponse(buf[:0], 1, 2, StatusServerError, msg) }},
		{"AppendErrorResponseNonASCII", func() { buf = AppendErrorResponse(buf[:0], 1, 2, StatusServerError, "连接断开 😀") }},
		{"AppendHessianString", func() { buf = AppendHessianString(buf[:0], msg) }},
	}
	for _, tc := range tests {
		if got := testing.AllocsPerRun(200, tc.fn); got != 0 {
			t.Errorf("%s: %v allocs/op, want 0", tc.name, got)
		}
	}
}
