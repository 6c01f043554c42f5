package dubbo

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf16"
)

func TestHessianStringRoundTrip(t *testing.T) {
	emoji := "😀" // U+1F600: two UTF-16 units
	tests := []struct {
		name  string
		s     string
		units int
		head  []byte // expected first bytes of the encoding
	}{
		{"empty", "", 0, []byte{0x00}},
		{"one", "a", 1, []byte{0x01, 'a'}},
		{"31", strings.Repeat("a", 31), 31, []byte{0x1f, 'a'}},
		{"32", strings.Repeat("a", 32), 32, []byte{0x30, 0x20, 'a'}},
		{"1023", strings.Repeat("a", 1023), 1023, []byte{0x33, 0xff, 'a'}},
		{"1024", strings.Repeat("a", 1024), 1024, []byte{'S', 0x04, 0x00, 'a'}},
		{"32768 one chunk", strings.Repeat("a", 32768), 32768, []byte{'S', 0x80, 0x00, 'a'}},
		{"32769 two chunks", strings.Repeat("a", 32769), 32769, []byte{'R', 0x80, 0x00, 'a'}},
		{"40000", strings.Repeat("a", 40000), 40000, []byte{'R', 0x80, 0x00, 'a'}},
		{"70000 three chunks", strings.Repeat("b", 70000), 70000, []byte{'R', 0x80, 0x00, 'b'}},
		{"two-byte utf-8", "é", 1, []byte{0x01, 0xc3, 0xa9}},
		{"three-byte utf-8", "中文", 2, []byte{0x02, 0xe4, 0xb8, 0xad}},
		{"surrogate pair", emoji, 2, []byte{0x02, 0xed, 0xa0, 0xbd, 0xed, 0xb8, 0x80}},
		{"31 units with a pair", strings.Repeat("a", 29) + emoji, 31, []byte{0x1f, 'a'}},
		{"32 units with a pair", strings.Repeat("a", 30) + emoji, 32, []byte{0x30, 0x20, 'a'}},
		{"mixed", "a é 中 " + emoji + " z", 10, []byte{0x0a, 'a'}},
		{"many pairs across chunks", strings.Repeat(emoji, 20000), 40000, []byte{'R', 0x80, 0x00, 0xed}},
		{"pair on the chunk boundary", strings.Repeat("a", 32767) + emoji + "b", 32770, []byte{'R', 0x7f, 0xff, 'a'}},
		{"non-ascii 1023", strings.Repeat("é", 1023), 1023, []byte{0x33, 0xff, 0xc3}},
		{"non-ascii 40000", strings.Repeat("中", 40000), 40000, []byte{'R', 0x80, 0x00, 0xe4}},
		{"nul", "\x00", 1, []byte{0x01, 0x00}},
		{"U+FFFF", "\uffff", 1, []byte{0x01, 0xef, 0xbf, 0xbf}},
		{"U+10FFFF", "\U0010ffff", 2, []byte{0x02, 0xed, 0xaf, 0xbf, 0xed, 0xbf, 0xbf}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if n := len(utf16.Encode([]rune(tc.s))); n != tc.units {
				t.Fatalf("test bug: %d units, table says %d", n, tc.units)
			}
			enc := AppendHessianString(nil, tc.s)
			if !bytes.HasPrefix(enc, tc.head) {
				t.Fatalf("encoding starts % x, want % x", enc[:min(len(enc), 8)], tc.head)
			}
			if got := javaUnits(t, enc); got != tc.units {
				t.Fatalf("chunk lengths add up to %d units, want %d", got, tc.units)
			}
			trailer := []byte{'N', 0x91}
			s, n, err := ReadHessianString(append(enc, trailer...))
			if err != nil || n != len(enc) || s != tc.s {
				t.Fatalf("ReadHessianString: n=%d (want %d) err=%v equal=%v", n, len(enc), err, s == tc.s)
			}
		})
	}
}

// javaUnits walks the chunk structure of an encoded string the way Java's
// Hessian2Input does (1-3 bytes per unit, never 4) and returns the unit total.
// It fails the test if a chunk ends inside a surrogate pair.
func javaUnits(t *testing.T, enc []byte) int {
	t.Helper()
	total, pos := 0, 0
	for {
		tag := enc[pos]
		var units int
		final := true
		switch {
		case tag <= 0x1f:
			units, pos = int(tag), pos+1
		case tag >= 0x30 && tag <= 0x33:
			units, pos = int(tag-0x30)<<8|int(enc[pos+1]), pos+2
		case tag == 'S' || tag == 'R':
			units, pos, final = int(enc[pos+1])<<8|int(enc[pos+2]), pos+3, tag == 'S'
		default:
			t.Fatalf("tag %#x at %d", tag, pos)
		}
		var last rune
		for i := 0; i < units; i++ {
			c := enc[pos]
			switch {
			case c < 0x80:
				last, pos = rune(c), pos+1
			case c&0xe0 == 0xc0:
				last, pos = rune(c&0x1f)<<6|rune(enc[pos+1]&0x3f), pos+2
			case c&0xf0 == 0xe0:
				last, pos = rune(c&0x0f)<<12|rune(enc[pos+1]&0x3f)<<6|rune(enc[pos+2]&0x3f), pos+3
			default:
				t.Fatalf("byte %#x at %d is not a 1-3 byte sequence: Java cannot read it", c, pos)
			}
		}
		if !final && last >= 0xd800 && last <= 0xdbff {
			t.Fatalf("non-final chunk ends in a high surrogate")
		}
		total += units
		if final {
			if pos != len(enc) {
				t.Fatalf("%d bytes after the final chunk", len(enc)-pos)
			}
			return total
		}
	}
}

func TestHessianStringInvalidUTF8Input(t *testing.T) {
	enc := AppendHessianString(nil, "a\xffb")
	want := []byte{0x03, 'a', 0xef, 0xbf, 0xbd, 'b'}
	if !bytes.Equal(enc, want) {
		t.Fatalf("got % x, want % x", enc, want)
	}
	s, _, err := ReadHessianString(enc)
	if err != nil || s != "a\uFFFDb" {
		t.Fatalf("got %q, %v", s, err)
	}
}

func TestReadHessianString(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
		n    int
		err  error
	}{
		{"null", []byte{'N', 0x01}, "", 1, nil},
		{"empty", []byte{0x00, 'x'}, "", 1, nil},
		{"short", []byte{0x02, 'h', 'i', 0xff}, "hi", 3, nil},
		{"medium zero length", []byte{0x30, 0x00}, "", 2, nil},
		{"S zero length", []byte{'S', 0x00, 0x00}, "", 3, nil},
		{"S short string", []byte{'S', 0x00, 0x02, 'h', 'i'}, "hi", 5, nil},
		{"chunked", []byte{'R', 0x00, 0x02, 'h', 'e', 0x03, 'l', 'l', 'o'}, "hello", 9, nil},
		{"chunk then medium", []byte{'R', 0x00, 0x01, 'a', 0x30, 0x01, 'b'}, "ab", 7, nil},
		{"chunk then chunk then S", []byte{'R', 0, 1, 'a', 'R', 0, 1, 'b', 'S', 0, 1, 'c'}, "abc", 12, nil},
		{"pair split across chunks", []byte{'R', 0, 1, 0xed, 0xa0, 0xbd, 0x01, 0xed, 0xb8, 0x80}, "😀", 10, nil},
		{"4-byte utf-8 counts two units", []byte{0x02, 0xf0, 0x9f, 0x98, 0x80}, "😀", 5, nil},
		{"lone high surrogate", []byte{0x02, 0xed, 0xa0, 0xbd, 'a'}, "\uFFFDa", 5, nil},
		{"lone low surrogate", []byte{0x01, 0xed, 0xb8, 0x80}, "\uFFFD", 4, nil},
		{"two high surrogates", []byte{0x02, 0xed, 0xa0, 0xbd, 0xed, 0xa0, 0xbd}, "\uFFFD\uFFFD", 7, nil},
		{"overlong nul (Java accepts)", []byte{0x01, 0xc0, 0x80}, "\x00", 3, nil},
		{"bytes count units not bytes", []byte{0x02, 0xc3, 0xa9, 0xe4, 0xb8, 0xad}, "é中", 6, nil},
		{"nothing", nil, "", 0, ErrTruncated},
		{"short truncated", []byte{0x03, 'a', 'b'}, "", 0, ErrTruncated},
		{"medium missing length", []byte{0x30}, "", 0, ErrTruncated},
		{"S missing length", []byte{'S', 0x00}, "", 0, ErrTruncated},
		{"S truncated", []byte{'S', 0xff, 0xff, 'a'}, "", 0, ErrTruncated},
		{"chunk without final", []byte{'R', 0x00, 0x01, 'a'}, "", 0, ErrTruncated},
		{"chunk then null", []byte{'R', 0x00, 0x01, 'a', 'N'}, "", 0, ErrNotString},
		{"truncated 3-byte", []byte{0x01, 0xe4, 0xb8}, "", 0, ErrTruncated},
		{"int", []byte{0x91}, "", 0, ErrNotString},
		{"map", []byte{'H', 'Z'}, "", 0, ErrNotString},
		{"binary", []byte{0x20}, "", 0, ErrNotString},
		{"medium tag 0x34 is binary", []byte{0x34, 0x00}, "", 0, ErrNotString},
		{"bad continuation", []byte{0x01, 0xc3, 0x41}, "", 0, ErrBadUTF8},
		{"stray continuation", []byte{0x01, 0x80}, "", 0, ErrBadUTF8},
		{"5-byte lead", []byte{0x01, 0xf8, 0x80, 0x80, 0x80, 0x80}, "", 0, ErrBadUTF8},
		{"4-byte in last unit", []byte{0x01, 0xf0, 0x9f, 0x98, 0x80}, "", 0, ErrBadUTF8},
		{"4-byte overlong", []byte{0x02, 0xf0, 0x80, 0x80, 0x80}, "", 0, ErrBadUTF8},
		{"4-byte above U+10FFFF", []byte{0x02, 0xf4, 0x90, 0x80, 0x80}, "", 0, ErrBadUTF8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, n, err := ReadHessianString(tc.in)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if s != tc.want || n != tc.n {
				t.Fatalf("got %q, %d; want %q, %d", s, n, tc.want, tc.n)
			}
			if tc.err == nil {
				if m, err := skipHessianString(tc.in); err != nil || m != tc.n {
					t.Fatalf("skip = %d, %v; want %d", m, err, tc.n)
				}
			}
		})
	}
}

// TestReadHessianStringHugeClaim checks that a length claim larger than the input is
// refused without allocating for the claim.
func TestReadHessianStringHugeClaim(t *testing.T) {
	in := []byte{'R', 0xff, 0xff, 'a'}
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := ReadHessianString(in); !errors.Is(err, ErrTruncated) {
			t.Fatalf("err = %v", err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs for a refused string", allocs)
	}
}

func TestReadHessianStringAllocs(t *testing.T) {
	for _, s := range []string{"hello world", "连接断开 😀", strings.Repeat("x", 40000)} {
		enc := AppendHessianString(nil, s)
		if got := testing.AllocsPerRun(50, func() { _, _, _ = ReadHessianString(enc) }); got != 1 {
			t.Errorf("%d-byte string: %v allocs/op, want 1", len(s), got)
		}
	}
}
