package peer

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExceptionResponse(t *testing.T) {
	frame := appendExceptionResponse(nil, 3, 2, "java.lang.RuntimeException", "fail: x")
	want := unhex(t, "dabb0214 0000000000000003 0000007b"+
		"90 43 1a"+hex.EncodeToString([]byte("java.lang.RuntimeException"))+"94"+
		"0d"+hex.EncodeToString([]byte("detailMessage"))+
		"05"+hex.EncodeToString([]byte("cause"))+
		"0a"+hex.EncodeToString([]byte("stackTrace"))+
		"14"+hex.EncodeToString([]byte("suppressedExceptions"))+
		"60 07"+hex.EncodeToString([]byte("fail: x"))+
		"4e 70 1c"+hex.EncodeToString([]byte("[java.lang.StackTraceElement"))+"4e")
	if !bytes.Equal(frame, want) {
		t.Fatalf("got  % x\nwant % x", frame, want)
	}
	msg, class := okBody(frame[dubbo.HeaderLen:])
	if class != "java.lang.RuntimeException" || msg != "fail: x" {
		t.Fatalf("parsed %q %q", msg, class)
	}
	body := frame[dubbo.HeaderLen:]
	for cut := range len(body) {
		_, _ = okBody(body[:cut]) // must not panic
	}
}

func TestReadHessianInt(t *testing.T) {
	cases := []struct {
		in   string
		want int32
	}{
		{"90", 0}, {"80", -16}, {"bf", 47}, {"c8 30", 48}, {"c0 00", -2048}, {"d4 08 00", 2048},
		{"49 7fffffff", 1<<31 - 1},
	}
	for _, tc := range cases {
		b := unhex(t, tc.in)
		got, n, err := readHessianInt(b)
		if err != nil || got != tc.want || n != len(b) {
			t.Errorf("%s: %d %d %v", tc.in, got, n, err)
		}
	}
	for _, bad := range []string{"", "c8", "d4 08", "49 00", "4e"} {
		if _, _, err := readHessianInt(unhex(t, bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

func FuzzOKBody(f *testing.F) {
	f.Add(appendExceptionResponse(nil, 1, 2, "java.lang.IllegalStateException", "x")[dubbo.HeaderLen:])
	f.Add(dubbo.AppendValueResponse(nil, 1, 2, "hello")[dubbo.HeaderLen:])
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = okBody(b) })
}
