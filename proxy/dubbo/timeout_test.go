package dubbo

import (
	"encoding/hex"
	"testing"
	"time"
)

// dubboGoRequest500 is the first request the real dubbo-go v3.3.0 consumer
// (interop/cmd/dgconsumer --timeout 500ms once, hessian2) wrote to a listener: the
// attachments map holds timeout -> "500" as a string, after retries, path,
// interface and version.
const dubboGoRequest500 = "dabbc2000000000000000002000000a005322e302e32156f72672e73746f726d676174652e477265657465720004" +
	"4563686f124c6a6176612f6c616e672f537472696e673b0f68656c6c6f2073746f726d67617465480772657472696573000470617468" +
	"156f72672e73746f726d676174652e4772656574657209696e74657266616365156f72672e73746f726d676174652e47726565746572" +
	"0776657273696f6e000774696d656f7574033530305a"

// rawRequest builds a hessian2 request frame (flags given) from encoded body values.
func rawRequest(flags byte, values ...[]byte) []byte {
	f := AppendHeader(nil, Header{Flags: flags, ID: 9})
	for _, v := range values {
		f = append(f, v...)
	}
	putBodyLen(f)
	return f
}

func hmap(kv ...[]byte) []byte { return hmapTyped(nil, kv...) }

// hmapTyped is an untyped map, or a typed one when typ is not nil.
func hmapTyped(typ []byte, kv ...[]byte) []byte {
	b := []byte{'H'}
	if typ != nil {
		b = append([]byte{'M'}, typ...)
	}
	for _, x := range kv {
		b = append(b, x...)
	}
	return append(b, 'Z')
}

// hint encodes a hessian2 int in its shortest form.
func hint(v int32) []byte {
	switch {
	case v >= -16 && v <= 47:
		return []byte{byte(0x90 + v)}
	case v >= -2048 && v <= 2047:
		return []byte{byte(0xc8 + v>>8), byte(v)}
	case v >= -262144 && v <= 262143:
		return []byte{byte(0xd4 + v>>16), byte(v >> 8), byte(v)}
	}
	return []byte{'I', byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

func TestRequestTimeout(t *testing.T) {
	const req = FlagRequest | FlagTwoWay | SerialHessian2
	head := [][]byte{hs("2.0.2"), hs("org.example.Transfer"), hs("1.0.0"), hs("pay"), hs("Ljava/lang/String;")}
	with := func(parts ...[]byte) [][]byte { return append(append([][]byte(nil), head...), parts...) }
	dubboGo, _ := hex.DecodeString(dubboGoRequest500)
	// An argument that holds the very bytes of the attachment, and a map argument with a
	// timeout entry of its own: neither is the request's timeout.
	decoy := hs("\x07timeout\x0412345")
	for _, c := range []struct {
		name  string
		frame []byte
		want  time.Duration
		ok    bool
	}{
		{"dubbo-go v3.3.0 on the wire", dubboGo, 500 * time.Millisecond, true},
		{"Java 3.x: a string", rawRequest(req, with(hs("arg"), hmap(hs("path"), hs("org.example.Transfer"),
			hs("interface"), hs("org.example.Transfer"), hs("version"), hs("1.0.0"), hs("timeout"), hs("1000")))...),
			time.Second, true},
		{"dubbo-js: an int in a typed HashMap", rawRequest(req, with(hs("arg"), hmapTyped(hs("java.util.HashMap"),
			hs("path"), hs("org.example.Transfer"), hs("timeout"), hint(3000)))...), 3 * time.Second, true},
		{"compact int", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hint(40)))...), 40 * time.Millisecond, true},
		{"'I' int", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hint(600000)))...), 10 * time.Minute, true},
		{"long", rawRequest(req, with(hs("a"), hmap(hs("timeout"), []byte{'L', 0, 0, 0, 0, 0, 0, 0x13, 0x88}))...), 5 * time.Second, true},
		{"compact long", rawRequest(req, with(hs("a"), hmap(hs("timeout"), []byte{0xf8 + 1, 0xf4}))...), 500 * time.Millisecond, true},
		{"dubbox: an int before the descriptor", rawRequest(req, hs("2.0.2"), hs("s"), hs(""), hs("m"), hint(-1),
			hs("I"), hint(7), hmap(hs("timeout"), hs("250"))), 250 * time.Millisecond, true},
		{"no arguments", rawRequest(req, hs("2.0.2"), hs("s"), hs(""), hs("m"), hs(""), hmap(hs("timeout"), hs("9"))),
			9 * time.Millisecond, true},
		{"an argument that holds the key's bytes", rawRequest(req, with(decoy, hmap(hs("path"), hs("p"), hs("timeout"), hs("700")))...),
			700 * time.Millisecond, true},
		{"only an argument holds the key's bytes", rawRequest(req, with(decoy, hmap(hs("path"), hs("p")))...), 0, false},
		{"a map argument with a timeout, attachments without", rawRequest(req, hs("2.0.2"), hs("s"), hs(""), hs("m"),
			hs("Ljava/util/Map;"), hmap(hs("timeout"), hs("5")), hmap(hs("path"), hs("p"))), 0, false},
		{"object arguments with class definitions", rawRequest(req, hs("2.0.2"), hs("s"), hs(""), hs("m"),
			hs("Lx/P;Lx/P;"), cat([]byte{'C'}, hs("x.P"), hint(2), hs("a"), hs("b"), []byte{0x60}, hs("1"), hint(2)),
			cat([]byte{0x60}, hs("3"), hint(4)), hmap(hs("timeout"), hs("1500"))), 1500 * time.Millisecond, true},
		{"no timeout attachment", rawRequest(req, with(hs("a"), hmap(hs("path"), hs("p")))...), 0, false},
		{"zero", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hs("0")))...), 0, false},
		{"negative int", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hint(-5)))...), 0, false},
		{"not a number", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hs("1s")))...), 0, false},
		{"empty string", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hs("")))...), 0, false},
		{"null", rawRequest(req, with(hs("a"), hmap(hs("timeout"), []byte{'N'}))...), 0, false},
		{"more than a day", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hs("86400001")))...), 0, false},
		{"eleven digits", rawRequest(req, with(hs("a"), hmap(hs("timeout"), hs("00000001000")))...), 0, false},
		{"trailing bytes after the attachments", append(rawRequest(req, with(hs("a"), hmap(hs("timeout"), hs("5")))...), 'x'), 0, false},
		{"the body ends inside the attachments", rawRequest(req, with(hs("a"), []byte{'H'}, hs("timeout"), hs("5"))...), 0, false},
		{"attachments not a map", rawRequest(req, with(hs("a"), hs("timeout"))...), 0, false},
		{"one-way request", rawRequest(FlagRequest|SerialHessian2, with(hs("a"), hmap(hs("timeout"), hs("5")))...), 5 * time.Millisecond, true},
		{"heartbeat", AppendHeartbeatRequest(nil, 1), 0, false},
		{"a response", AppendValueResponse(nil, 1, SerialHessian2, "x"), 0, false},
		{"another serialization", rawRequest(req&^SerialMask|6, with(hs("a"), hmap(hs("timeout"), hs("5")))...), 0, false},
		{"bad magic", append([]byte{0, 0}, rawRequest(req, with(hs("a"), hmap(hs("timeout"), hs("5")))...)[2:]...), 0, false},
		{"header only", AppendHeader(nil, Header{Flags: req}), 0, false},
	} {
		got, ok := RequestTimeout(c.frame)
		if ok != c.ok || got != c.want {
			t.Errorf("%s: RequestTimeout = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

// Every prefix of a valid request is refused, never misread or a panic.
func TestRequestTimeoutPrefixes(t *testing.T) {
	f, _ := hex.DecodeString(dubboGoRequest500)
	for i := range len(f) {
		p := append([]byte(nil), f[:i]...)
		if i >= HeaderLen {
			putBodyLen(p)
		}
		if d, ok := RequestTimeout(p); ok {
			t.Fatalf("a %d-byte prefix read as %v", i, d)
		}
	}
}

func TestRequestTimeoutDoesNotAllocate(t *testing.T) {
	f, _ := hex.DecodeString(dubboGoRequest500)
	if n := testing.AllocsPerRun(100, func() { RequestTimeout(f) }); n != 0 {
		t.Fatalf("RequestTimeout allocates %v times per call", n)
	}
}

func BenchmarkRequestTimeout(b *testing.B) {
	f, _ := hex.DecodeString(dubboGoRequest500)
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		RequestTimeout(f)
	}
}

func FuzzRequestTimeout(f *testing.F) {
	g, _ := hex.DecodeString(dubboGoRequest500)
	f.Add(g)
	f.Add(AppendRequest(nil, 1, true, "s", "m", "a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ok := RequestTimeout(b)
		if ok && (d <= 0 || d > MaxBelievedTimeout) {
			t.Fatalf("believed %v", d)
		}
	})
}

func TestAppendRequestTimeoutRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 500 * time.Millisecond, 3 * time.Second, time.Hour} {
		f := AppendRequestTimeout(nil, 5, true, "org.example.S", "m", "arg", d)
		if got, ok := RequestTimeout(f); !ok || got != d {
			t.Errorf("%v: RequestTimeout = %v, %v", d, got, ok)
		}
		svc, m, arg, err := ParseRequest(f[HeaderLen:])
		if err != nil || svc != "org.example.S" || m != "m" || arg != "arg" {
			t.Errorf("%v: ParseRequest = %q %q %q %v", d, svc, m, arg, err)
		}
	}
	if _, ok := RequestTimeout(AppendRequestTimeout(nil, 5, true, "s", "m", "a", 0)); ok {
		t.Error("a request built without a timeout carries one")
	}
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(50, func() { AppendRequestTimeout(buf[:0], 1, true, "s", "m", "a", time.Second) }); n != 0 {
		t.Errorf("AppendRequestTimeout into a buffer with room allocates %v times", n)
	}
}
