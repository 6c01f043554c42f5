package dubbo

import (
	"strings"
	"testing"
)

func BenchmarkParseHeader(b *testing.B) {
	frame := AppendRequest(nil, 7, true, "org.example.Greeter", "sayHello", "world")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseHeader(frame, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSplit(b *testing.B) {
	frame := AppendRequest(nil, 7, true, "org.example.Greeter", "sayHello", "world")
	b.ReportAllocs()
	for b.Loop() {
		if _, n, err := Split(frame, 0); n == 0 || err != nil {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkSetID(b *testing.B) {
	frame := AppendRequest(nil, 7, true, "org.example.Greeter", "sayHello", "world")
	b.ReportAllocs()
	var id int64
	for b.Loop() {
		id++
		SetID(frame, id)
	}
}

func BenchmarkAppendHeartbeatReply(b *testing.B) {
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendHeartbeatReply(buf[:0], 42, SerialHessian2)
	}
}

func BenchmarkAppendErrorResponse(b *testing.B) {
	for _, tc := range []struct{ name, msg string }{
		{"ascii64", strings.Repeat("x", 64)},
		{"ascii2k", strings.Repeat("x", 2048)},
		{"nonascii64", strings.Repeat("断", 64)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 8192)
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.msg)))
			for b.Loop() {
				buf = AppendErrorResponse(buf[:0], 42, SerialHessian2, StatusServerError, tc.msg)
			}
		})
	}
}

func BenchmarkReadHessianString(b *testing.B) {
	for _, tc := range []struct{ name, s string }{
		{"ascii64", strings.Repeat("x", 64)},
		{"nonascii64", strings.Repeat("断", 64)},
		{"pairs64", strings.Repeat("😀", 32)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			enc := AppendHessianString(nil, tc.s)
			b.ReportAllocs()
			b.SetBytes(int64(len(enc)))
			for b.Loop() {
				if _, _, err := ReadHessianString(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParseRequest(b *testing.B) {
	body := AppendRequest(nil, 7, true, "org.example.Greeter", "sayHello", "world")[HeaderLen:]
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := ParseRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
