package dubbo

import (
	"bytes"
	"testing"
	"unicode/utf8"
)

// fuzzCaps are the frame caps the seeds are tried with: default, dubbo-go's, tiny.
var fuzzCaps = []int{0, -5, 102400, HeaderLen, 17}

func seedFrames(f *testing.F) {
	for _, tc := range frameCases {
		for _, c := range append(fuzzCaps, tc.maxFrame) {
			f.Add(tc.frame, c)
		}
	}
	stream := cat(AppendHeartbeatRequest(nil, 1), AppendRequest(nil, 2, true, "s", "m", "a"))
	for i := 0; i <= len(stream); i += 7 {
		f.Add(stream[:i], 0)
	}
}

func FuzzParseHeader(f *testing.F) {
	seedFrames(f)
	f.Fuzz(func(t *testing.T, b []byte, maxFrame int) {
		h, err := ParseHeader(b, maxFrame)
		if err != nil {
			return
		}
		if h.BodyLen < 0 || h.FrameLen() > effectiveMax(maxFrame) {
			t.Fatalf("accepted %+v with cap %d", h, maxFrame)
		}
		if !bytes.Equal(AppendHeader(nil, h), b[:HeaderLen]) {
			t.Fatalf("header does not round-trip")
		}
		if k := h.Kind(); k == KindInvalid || k > KindEventResponse {
			t.Fatalf("kind %v for flags %#x", k, h.Flags)
		}
	})
}

func FuzzSplit(f *testing.F) {
	seedFrames(f)
	f.Fuzz(func(t *testing.T, buf []byte, maxFrame int) {
		h, n, err := Split(buf, maxFrame)
		if err != nil {
			if n != 0 {
				t.Fatalf("n = %d with error %v", n, err)
			}
			return
		}
		if n == 0 {
			if len(buf) >= HeaderLen && len(buf) >= h.FrameLen() {
				t.Fatalf("n = 0 although buf holds the %d-byte frame", h.FrameLen())
			}
			return
		}
		if n != h.FrameLen() || n > len(buf) || n < HeaderLen {
			t.Fatalf("n = %d, FrameLen %d, len(buf) %d", n, h.FrameLen(), len(buf))
		}
		if n > effectiveMax(maxFrame) {
			t.Fatalf("frame of %d bytes over cap %d", n, maxFrame)
		}
		// What Split accepts, ParseHeader accepts identically.
		if h2, err := ParseHeader(buf, maxFrame); err != nil || h2 != h {
			t.Fatalf("ParseHeader disagrees: %+v %v", h2, err)
		}
	})
}

func FuzzHessianString(f *testing.F) {
	for _, s := range []string{"", "a", "hello", "é", "中文", "😀", "a\xffb", "\xed\xa0\xbd", string(make([]byte, 40))} {
		f.Add(s, []byte(s))
		f.Add(s, AppendHessianString(nil, s))
	}
	f.Add("", []byte{'R', 0, 1, 0xed, 0xa0, 0xbd, 0x01, 0xed, 0xb8, 0x80})
	f.Add("", []byte{0x02, 0xf0, 0x9f, 0x98, 0x80})
	f.Add("", []byte{'R', 0xff, 0xff})
	f.Fuzz(func(t *testing.T, s string, raw []byte) {
		// Round trip: what we write decodes to s (invalid UTF-8 as U+FFFD per byte).
		want := string([]rune(s))
		enc := AppendHessianString([]byte{0xaa}, s)[1:]
		got, n, err := ReadHessianString(append(enc, raw...))
		if err != nil || n != len(enc) || got != want {
			t.Fatalf("round trip of %q: got %q n=%d/%d err=%v", s, got, n, len(enc), err)
		}
		if m, err := skipHessianString(enc); err != nil || m != len(enc) {
			t.Fatalf("skip = %d, %v", m, err)
		}
		// Arbitrary bytes: no panic, n within bounds, valid UTF-8 out, and a
		// re-encoding reads back the same text.
		got, n, err = ReadHessianString(raw)
		if err != nil {
			if n != 0 || got != "" {
				t.Fatalf("error %v with n=%d s=%q", err, n, got)
			}
			return
		}
		if n < 1 || n > len(raw) || !utf8.ValidString(got) {
			t.Fatalf("n=%d len=%d valid=%v", n, len(raw), utf8.ValidString(got))
		}
		if len(got) > n {
			t.Fatalf("decoded %d bytes from %d input bytes", len(got), n)
		}
		again, _, err := ReadHessianString(AppendHessianString(nil, got))
		if err != nil || again != got {
			t.Fatalf("re-encoding %q read back %q, %v", got, again, err)
		}
	})
}

// FuzzProviderAnswer: NotExecuted and ClosingAttachment read hostile frames without
// panicking, and claim something only for the statuses and bytes that can carry it.
func FuzzProviderAnswer(f *testing.F) {
	for _, b := range dubbogoAnswers(f) {
		f.Add(b)
	}
	f.Add(javaError(StatusServiceError, "org.apache.dubbo.remoting.RemotingException: Not found exported service: x"))
	f.Add(javaError(StatusBadRequest, "Fail to decode request due to: java.lang.IllegalArgumentException: Service not found:x"))
	f.Add(javaError(StatusThreadpoolExhausted, "Server side(1.2.3.4,5) thread pool is exhausted, detail msg:"))
	f.Fuzz(func(t *testing.T, frame []byte) {
		r := NotExecuted(frame)
		if r != Ran {
			switch frame[3] {
			case StatusOK, StatusServiceError, StatusBadRequest, StatusThreadpoolExhausted:
			default:
				t.Fatalf("%v for status %d", r, frame[3])
			}
		}
		if ClosingAttachment(frame) {
			if frame[3] != StatusOK || !bytes.Contains(frame[HeaderLen:], closingKey) || !bytes.Contains(frame[HeaderLen:], closingTrue) {
				t.Fatalf("closing without the attachment's bytes")
			}
		}
	})
}
