package dubbo

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// hs is shorthand for the hessian2 encoding of s.
func hs(s string) []byte { return AppendHessianString(nil, s) }

func TestAppendRequestExactBody(t *testing.T) {
	frame := AppendRequest(nil, 0x0102030405060708, true, "org.example.Greeter", "sayHello", "world")
	body := cat(
		[]byte{0x05}, []byte("2.0.2"),
		[]byte{0x13}, []byte("org.example.Greeter"),
		[]byte{0x05}, []byte("0.0.0"),
		[]byte{0x08}, []byte("sayHello"),
		[]byte{0x12}, []byte("Ljava/lang/String;"),
		[]byte{0x05}, []byte("world"),
		[]byte{'H'},
		[]byte{0x04}, []byte("path"), []byte{0x13}, []byte("org.example.Greeter"),
		[]byte{0x09}, []byte("interface"), []byte{0x13}, []byte("org.example.Greeter"),
		[]byte{0x07}, []byte("version"), []byte{0x05}, []byte("0.0.0"),
		[]byte{'Z'},
	)
	want := cat(hdr(0xc2, 0x00, idBig, [4]byte{0, 0, 0, byte(len(body))}), body)
	if !bytes.Equal(frame, want) {
		t.Fatalf("got  % x\nwant % x", frame, want)
	}
	oneWay := AppendRequest(nil, 1, false, "s", "m", "a")
	if h, _ := ParseHeader(oneWay, 0); h.Flags != 0x82 || h.Kind() != KindOneWay {
		t.Fatalf("one-way flags %#x kind %v", h.Flags, h.Kind())
	}
}

func TestRequestRoundTrip(t *testing.T) {
	args := []string{"", "world", strings.Repeat("x", 40000), "连接 😀"}
	for _, arg := range args {
		frame := AppendRequest(nil, 7, true, "org.example.Greeter", "sayHello", arg)
		h, n, err := Split(frame, 0)
		if err != nil || n != len(frame) || h.Kind() != KindRequest {
			t.Fatalf("Split: %+v %d %v", h, n, err)
		}
		svc, method, got, err := ParseRequest(frame[HeaderLen:])
		if err != nil || svc != "org.example.Greeter" || method != "sayHello" || got != arg {
			t.Fatalf("ParseRequest = %q %q (arg equal %v) %v", svc, method, got == arg, err)
		}
	}
}

func TestParseRequestConsumerBodies(t *testing.T) {
	attachments := cat([]byte{'H'},
		hs("path"), hs("org.example.Greeter"),
		hs("timeout"), []byte{0xd0, 0x13, 0x88}, // int 5000, not a string
		hs("async"), []byte{'F'},
		hs("interface"), hs("org.example.Greeter"),
		[]byte{'Z'})
	tests := []struct {
		name                 string
		body                 []byte
		service, method, arg string
		err                  error
	}{
		{
			// Java 2.7 writes a null service version when none is configured.
			name:    "null version, extra attachments",
			body:    cat(hs("2.0.2"), hs("org.example.Greeter"), []byte{'N'}, hs("sayHello"), hs("Ljava/lang/String;"), hs("bob"), attachments),
			service: "org.example.Greeter", method: "sayHello", arg: "bob",
		},
		{
			name:    "null argument",
			body:    cat(hs("2.0.2"), hs("g.S"), hs("1.0"), hs("m"), hs("Ljava/lang/String;"), []byte{'N'}, attachments),
			service: "g.S", method: "m", arg: "",
		},
		{
			name:    "string then int arguments",
			body:    cat(hs("2.0.2"), hs("g.S"), hs(""), hs("m"), hs("Ljava/lang/String;I"), hs("a"), []byte{0x95}, attachments),
			service: "g.S", method: "m", arg: "a",
		},
		{
			name:    "generic invoke",
			body:    cat(hs("2.0.2"), hs("g.S"), hs("0.0.0"), hs("$invoke"), hs("Ljava/lang/String;[Ljava/lang/String;[Ljava/lang/Object;"), hs("sayHello"), []byte{0x79}, hs("java.lang.String"), []byte{0x79}, hs("x"), attachments),
			service: "g.S", method: "$invoke", arg: "sayHello",
		},
		{
			name:    "no arguments",
			body:    cat(hs("2.0.2"), hs("g.S"), hs("0.0.0"), hs("ping"), hs(""), attachments),
			service: "g.S", method: "ping",
		},
		{
			name:    "int first argument",
			body:    cat(hs("2.0.2"), hs("g.S"), hs("0.0.0"), hs("m"), hs("I"), []byte{0x91}, attachments),
			service: "g.S", method: "m", err: ErrArgNotString,
		},
		{
			name: "descriptor says string, value is int",
			body: cat(hs("2.0.2"), hs("g.S"), hs("0.0.0"), hs("m"), hs("Ljava/lang/String;"), []byte{0x91}),
			err:  ErrNotString,
		},
		{name: "empty", body: nil, err: ErrTruncated},
		{name: "heartbeat body", body: []byte{'N'}, err: ErrTruncated},
		{name: "not hessian", body: []byte("GET / HTTP/1.1\r\n"), err: ErrNotString},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc, method, arg, err := ParseRequest(tc.body)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if svc != tc.service || method != tc.method || arg != tc.arg {
				t.Fatalf("got %q %q %q, want %q %q %q", svc, method, arg, tc.service, tc.method, tc.arg)
			}
		})
	}
}

func TestParseRequestTruncated(t *testing.T) {
	frame := AppendRequest(nil, 7, true, "org.example.Greeter", "sayHello", "world")
	body := frame[HeaderLen:]
	argEnd := bytes.Index(body, []byte("world")) + len("world")
	for i := 0; i < argEnd; i++ {
		if _, _, _, err := ParseRequest(body[:i]); err == nil {
			t.Fatalf("body cut at %d of %d parsed without error", i, len(body))
		}
	}
	for i := argEnd; i <= len(body); i++ {
		if _, _, arg, err := ParseRequest(body[:i]); err != nil || arg != "world" {
			t.Fatalf("body cut at %d (after the argument): %q %v", i, arg, err)
		}
	}
}

func TestValueResponse(t *testing.T) {
	for _, v := range []string{"", "hello", strings.Repeat("é", 5000), "😀"} {
		frame := AppendValueResponse(nil, 3, SerialHessian2, v)
		h, n, err := Split(frame, 0)
		if err != nil || n != len(frame) || h.Kind() != KindResponse || h.Status != StatusOK || h.ID != 3 {
			t.Fatalf("Split: %+v %d %v", h, n, err)
		}
		got, err := ParseValueResponse(frame[HeaderLen:])
		if err != nil || got != v {
			t.Fatalf("ParseValueResponse: equal=%v err=%v", got == v, err)
		}
	}
}

func TestParseValueResponse(t *testing.T) {
	tests := []struct {
		name string
		body []byte
		want string
		err  error
	}{
		{"value", cat([]byte{0x91}, hs("hi")), "hi", nil},
		{"value, dubbo-go trailing null", cat([]byte{0x91}, hs("hi"), []byte{'N'}), "hi", nil},
		{"value with attachments", cat([]byte{0x94}, hs("hi"), []byte{'H'}, hs("dubbo"), hs("2.0.2"), []byte{'Z'}), "hi", nil},
		{"null value", []byte{0x92}, "", nil},
		{"null value with attachments", []byte{0x95, 'H', 'Z'}, "", nil},
		{"null string value", []byte{0x91, 'N'}, "", nil},
		{"exception", []byte{0x90, 'C'}, "", ErrResponseException},
		{"exception with attachments", []byte{0x93, 'C'}, "", ErrResponseException},
		{"unknown type", []byte{0x96}, "", ErrResponseType},
		{"int value", []byte{0x91, 0x91}, "", ErrNotString},
		{"truncated value", []byte{0x91, 0x05, 'h'}, "", ErrTruncated},
		{"empty", nil, "", ErrTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseValueResponse(tc.body)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Fatalf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestErrorResponseBody checks a non-OK body is exactly one hessian2 string.
func TestErrorResponseBody(t *testing.T) {
	for _, msg := range []string{"", "boom", strings.Repeat("超时", 20000)} {
		frame := AppendErrorResponse(nil, 1, SerialHessian2, StatusServerTimeout, msg)
		h, err := ParseHeader(frame, 0)
		if err != nil || h.Status != StatusServerTimeout || h.FrameLen() != len(frame) {
			t.Fatalf("header %+v err %v", h, err)
		}
		got, n, err := ReadHessianString(frame[HeaderLen:])
		if err != nil || got != msg || n != int(h.BodyLen) {
			t.Fatalf("body: n=%d of %d, equal=%v, err=%v", n, h.BodyLen, got == msg, err)
		}
	}
}
