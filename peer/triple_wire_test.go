package peer

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
)

// The bytes of a small call, written out by hand from the TripleRequestWrapper's protobuf fields
// (1 serializeType, 2 args, 3 argTypes) and hessian2's short binary and string forms, so the encoder
// cannot agree with a wrong decoder of its own.
func TestTripleMessageBytes(t *testing.T) {
	for _, c := range []struct {
		name string
		got  []byte
		want string
	}{
		{"byte[] of 1", AppendTripleBody(nil, 7, 1),
			"0000000012" + "0a08" + hex.EncodeToString([]byte("hessian2")) + "1202" + "21e1" + "1a02" + hex.EncodeToString([]byte("[B"))},
		{"String hello", AppendTripleString(nil, "hello"),
			"0000000024" + "0a08" + hex.EncodeToString([]byte("hessian2")) + "1206" + "05" + hex.EncodeToString([]byte("hello")) +
				"1a10" + hex.EncodeToString([]byte("java.lang.String"))},
	} {
		if got := hex.EncodeToString(c.got); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// Every hessian2 binary form and chunk boundary round-trips, and the encoded length is the one
// announced.
func TestTripleBodyRoundTrip(t *testing.T) {
	for _, n := range []int{1, 15, 16, 17, 1023, 1024, 32767, 32768, 32769, 65536, 65536 + 15, 65536 + 1023, 100_000} {
		key := uint64(1000 + n)
		msg := AppendTripleBody([]byte("prefix"), key, n)[len("prefix"):]
		body, err := TripleBody(msg, nil)
		if err != nil || !BodyEqual(body, key, n) {
			t.Fatalf("n=%d: %v (body %d bytes)", n, err, len(body))
		}
		h := hessianBinaryLen(n)
		if want := GRPCPrefixLen + 10 + 1 + len(binary.AppendUvarint(nil, uint64(h))) + h + 4; len(msg) != want {
			t.Fatalf("n=%d: message of %d bytes, want %d", n, len(msg), want)
		}
		// Any cut or changed length field is rejected, never a panic.
		for _, cut := range []int{1, 5, len(msg) / 2, len(msg) - 1} {
			if _, err := TripleBody(msg[:cut], nil); err == nil {
				t.Fatalf("n=%d: a message cut at %d was accepted", n, cut)
			}
		}
	}
	if _, err := TripleBody(AppendTripleString(nil, "x"), nil); !errors.Is(err, ErrTripleArg) {
		t.Fatalf("a String call: %v, want ErrTripleArg", err)
	}
}

func TestLoadPing(t *testing.T) {
	if n, ok := IsLoadPing(LoadPing(42)); !ok || n != 42 {
		t.Fatalf("LoadPing(42) read back as %d, %v", n, ok)
	}
	if _, ok := IsLoadPing([8]byte{0, 0, 0, 0, 0, 0, 0, 1}); ok {
		t.Fatal("Stormgate's own PING (a counter) read as a load PING")
	}
}

func FuzzTripleBody(f *testing.F) {
	f.Add(AppendTripleBody(nil, 1, 40_000))
	f.Add(AppendTripleString(nil, "hello"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = TripleBody(b, nil)
	})
}
