package dubbo

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// requestFixtures reads testdata/requests.txt: request frames written by Java's, dubbo-js's and
// dubbo-go's own encoders (the file says how each was made).
func requestFixtures(tb testing.TB) map[string][]byte {
	tb.Helper()
	return hexFixtures(tb, "testdata/requests.txt")
}

type wantCall struct{ service, version, group, method string }

func callOf(c Call) wantCall {
	return wantCall{string(c.Service), string(c.Version), string(c.Group), string(c.Method)}
}

// TestIdentifyRequestFixtures: service, version, group and method as each real encoder writes them.
func TestIdentifyRequestFixtures(t *testing.T) {
	const greeting = "org.apache.dubbo.demo.GreetingService"
	const demo = "org.apache.dubbo.demo.DemoProvider"
	const greeter = "org.stormgate.Greeter"
	want := map[string]wantCall{
		"java27_no_version":          {greeting, "", "", "sayHello"},
		"java3_group_version":        {greeting, "1.0.0", "gray", "sayHello"},
		"java_generic_invoke":        {greeting, "1.0.0", "", "sayHello"},
		"java_big_argument_group":    {greeting, "", "blue", "sayHello"},
		"java_map_argument_no_group": {greeting, "", "", "update"},
		"java_map_argument_group":    {greeting, "", "green", "update"},
		"java_unicode_group":         {greeting, "2.0", "灰度", "sayHello"},
		"dubbojs_group_timeout":      {demo, "1.0.0", "matrix", "sayHello"},
		"dubbojs_no_group":           {demo, "", "", "echo"},
		"dubbojs_dubbox":             {demo, "1.0.0", "dubbox", "getUserInfo"},
		"dubbogo_echo":               {greeter, "", "", "Echo"},
		"dubbogo_group_version":      {greeter, "2.1.0", "canary", "Echo"},
	}
	fx := requestFixtures(t)
	for name, w := range want {
		frame, ok := fx[name]
		if !ok {
			t.Errorf("%s: not in testdata/requests.txt", name)
			continue
		}
		var c Call
		if !IdentifyRequest(frame, &c) {
			t.Errorf("%s: not identified", name)
			continue
		}
		if got := callOf(c); got != w {
			t.Errorf("%s: %+v, want %+v", name, got, w)
		}
	}
	for name := range fx {
		if _, ok := want[name]; !ok {
			t.Errorf("fixture %s has no expected call in this test", name)
		}
	}
}

// reqFrame builds a hessian2 request frame from its parts: strings as given (nil: null), then raw.
func reqFrame(strs []*string, raw ...[]byte) []byte {
	var body []byte
	for _, s := range strs {
		if s == nil {
			body = append(body, 'N')
			continue
		}
		body = AppendHessianString(body, *s)
	}
	for _, r := range raw {
		body = append(body, r...)
	}
	f := AppendHeader(nil, Header{Flags: FlagRequest | FlagTwoWay | SerialHessian2, ID: 1, BodyLen: int32(len(body))})
	return append(f, body...)
}

func sp(s string) *string { return &s }

func attachments(kv ...string) []byte {
	b := []byte{'H'}
	for _, s := range kv {
		b = AppendHessianString(b, s)
	}
	return append(b, 'Z')
}

func TestIdentifyRequestCases(t *testing.T) {
	long := strings.Repeat("a", MaxNameLen+1)
	head := func(service, version, method string) []*string {
		return []*string{sp("2.0.2"), sp(service), sp(version), sp(method), sp("Ljava/lang/String;"), sp("x")}
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		ok    bool
		want  wantCall
	}{
		{"AppendRequest", AppendRequest(nil, 1, true, "a.B", "m", "x"), true, wantCall{"a.B", "", "", "m"}},
		{"one-way", AppendRequest(nil, 1, false, "a.B", "m", "x"), true, wantCall{"a.B", "", "", "m"}},
		{"group", reqFrame(head("a.B", "1", "m"), attachments("path", "a.B", "group", "g1")), true, wantCall{"a.B", "1", "g1", "m"}},
		{"empty group", reqFrame(head("a.B", "", "m"), attachments("group", "")), true, wantCall{"a.B", "", "", "m"}},
		{"group as a value", reqFrame(head("a.B", "", "m"), attachments("k", "group", "v", "w")), true, wantCall{"a.B", "", "", "m"}},
		{"group key, value not a string", reqFrame(head("a.B", "", "m"), []byte("H\x05group\x91Z")), true, wantCall{"a.B", "", "", "m"}},
		{"group in a string argument", reqFrame([]*string{sp("2.0.2"), sp("a.B"), nil, sp("m"), sp("Ljava/lang/String;"), sp("\x05group\x01xZ")}, attachments("path", "a.B")), true, wantCall{"a.B", "", "", "m"}},
		{"trailing bytes after attachments", append(reqFrame(head("a.B", "", "m"), attachments("group", "g")), 'N'), true, wantCall{"a.B", "", "", "m"}},
		{"no attachments", reqFrame(head("a.B", "", "m")), true, wantCall{"a.B", "", "", "m"}},
		{"non-ASCII method", reqFrame(head("a.B", "", "名字")), true, wantCall{"a.B", "", "", "名字"}},
		{"version 0.0.0 is no version", reqFrame(head("a.B", "0.0.0", "m")), true, wantCall{"a.B", "", "", "m"}},
		{"null version", reqFrame([]*string{sp("2.0.2"), sp("a.B"), nil, sp("m")}), true, wantCall{"a.B", "", "", "m"}},
		{"generic without its argument", reqFrame([]*string{sp("2.0.2"), sp("a.B"), nil, sp("$invoke"), sp("")}), true, wantCall{"a.B", "", "", "$invoke"}},
		{"header only", AppendHeader(nil, Header{Flags: 0xc2}), false, wantCall{}},
		{"a response", AppendValueResponse(nil, 1, 2, "x"), false, wantCall{}},
		{"other serialization", func() []byte { f := AppendRequest(nil, 1, true, "a.B", "m", "x"); f[2] = 0xc0 | 23; return f }(), false, wantCall{}},
		{"version not a version", reqFrame(head("a.B", "", "m"))[:16], false, wantCall{}},
		{"protocol version is text", reqFrame([]*string{sp("dubbo"), sp("a.B"), nil, sp("m")}), false, wantCall{}},
		{"null service", reqFrame([]*string{sp("2.0.2"), nil, nil, sp("m")}), false, wantCall{}},
		{"empty method", reqFrame([]*string{sp("2.0.2"), sp("a.B"), nil, sp("")}), false, wantCall{}},
		{"long service", reqFrame(head(long, "", "m")), false, wantCall{}},
		{"control character", reqFrame(head("a\nB", "", "m")), false, wantCall{}},
		{"chunked service", reqFrame([]*string{sp("2.0.2")}, []byte("R\x00\x01aS\x00\x01b"), []byte{'N', 1, 'm'}), false, wantCall{}},
		{"truncated method", reqFrame([]*string{sp("2.0.2"), sp("a.B"), nil}, []byte{5, 'm'}), false, wantCall{}},
		{"invalid utf-8", reqFrame([]*string{sp("2.0.2")}, []byte{2, 0xc3, 0x28}), false, wantCall{}},
		{"above the BMP", reqFrame([]*string{sp("2.0.2"), sp("a.B"), nil}, []byte{2, 0xf0, 0x9f, 0x98, 0x80}), false, wantCall{}},
		{"garbage", append(AppendHeader(nil, Header{Flags: 0xc2, BodyLen: 8}), 0xff, 0xfe, 1, 2, 3, 4, 5, 6), false, wantCall{}},
	} {
		var c Call
		ok := IdentifyRequest(tc.frame, &c)
		if ok != tc.ok {
			t.Errorf("%s: ok = %v, want %v (%+v)", tc.name, ok, tc.ok, callOf(c))
			continue
		}
		if ok && callOf(c) != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, callOf(c), tc.want)
		}
	}
}

// TestIdentifyRequestReadsOnlyTheTail: a group attachment before the last attachTail bytes is not
// looked for (the search is bounded), and one inside them is found whatever precedes it.
func TestIdentifyRequestReadsOnlyTheTail(t *testing.T) {
	head := []*string{sp("2.0.2"), sp("a.B"), nil, sp("m"), sp("Ljava/lang/String;"), sp(strings.Repeat("y", 100000))}
	var c Call
	if !IdentifyRequest(reqFrame(head, attachments("group", "g")), &c) || string(c.Group) != "g" {
		t.Fatalf("group after a 100 KB argument: %+v", callOf(c))
	}
	pad := strings.Repeat("p", attachTail)
	if !IdentifyRequest(reqFrame(head, attachments("group", "g", "pad", pad)), &c) || c.Group != nil {
		t.Fatalf("group before a %d-byte attachment: %+v, want none", attachTail, callOf(c))
	}
}

func TestIdentifyRequestDoesNotAllocate(t *testing.T) {
	fx := requestFixtures(t)
	for _, name := range []string{"java3_group_version", "dubbojs_group_timeout", "java_big_argument_group", "java_generic_invoke"} {
		frame := fx[name]
		var c Call
		ran := 0
		if n := testing.AllocsPerRun(200, func() {
			if IdentifyRequest(frame, &c) {
				ran++
			}
		}); n != 0 {
			t.Errorf("%s: %v allocs/op", name, n)
		}
		if ran == 0 {
			t.Fatalf("%s: never identified", name)
		}
	}
}

func BenchmarkIdentifyRequest(b *testing.B) {
	fx := requestFixtures(b)
	for _, name := range []string{"java27_no_version", "java3_group_version", "dubbojs_group_timeout", "java_big_argument_group"} {
		frame := fx[name]
		b.Run(name, func(b *testing.B) {
			var c Call
			b.ReportAllocs()
			for b.Loop() {
				if !IdentifyRequest(frame, &c) {
					b.Fatal("not identified")
				}
			}
		})
	}
}

func FuzzIdentifyRequest(f *testing.F) {
	for _, b := range requestFixtures(f) {
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Add(reqFrame([]*string{sp("2.0.2"), sp("a"), nil, sp("m")}, attachments("group", "g")))
	f.Fuzz(func(t *testing.T, frame []byte) {
		var c Call
		if !IdentifyRequest(frame, &c) {
			return
		}
		for i, name := range [][]byte{c.Service, c.Version, c.Group, c.Method} {
			if len(name) > MaxNameLen || !utf8.Valid(name) || bytes.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("name %d %q is not a label value", i, name)
			}
			if len(name) > 0 && !within(frame, name) {
				t.Fatalf("name %d %q is not a slice of the frame", i, name)
			}
		}
		if len(c.Service) == 0 || len(c.Method) == 0 {
			t.Fatalf("empty service or method: %+v", callOf(c))
		}
	})
}

// within reports whether s is a sub-slice of b.
func within(b, s []byte) bool {
	for i := range b {
		if &b[i] == &s[0] {
			return i+len(s) <= len(b)
		}
	}
	return false
}

// TestPrintableASCII checks the word-at-a-time check against the byte-at-a-time rule, for every
// length up to 20 at every offset, each byte value at each position.
func TestPrintableASCII(t *testing.T) {
	naive := func(b []byte) bool {
		for _, c := range b {
			if c < 0x20 || c >= 0x7f {
				return false
			}
		}
		return true
	}
	buf := make([]byte, 40)
	for n := 0; n <= 20; n++ {
		for start := 0; start+n <= len(buf); start += 3 {
			for pos := start; pos < start+n; pos++ {
				for v := 0; v < 256; v++ {
					for i := range buf {
						buf[i] = 'a'
					}
					buf[pos] = byte(v)
					if n+start < len(buf) {
						buf[start+n] = 0 // a byte after the name never counts
					}
					if got, want := printableASCII(buf, start, start+n), naive(buf[start:start+n]); got != want {
						t.Fatalf("n=%d start=%d byte %#x at %d: %v, want %v", n, start, v, pos, got, want)
					}
				}
			}
		}
	}
}
