package peer

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

func TestCheckedBodyRoundTrip(t *testing.T) {
	for _, n := range []int{1, 2, 7, 15, 16, 17, 23, 24, 25, 1000, 4096, 256 << 10} {
		key := uint64(0x0102030405060708) + uint64(n)
		b := AppendBody([]byte("prefix"), key, n)[len("prefix"):]
		if len(b) != n {
			t.Fatalf("n=%d: got %d bytes", n, len(b))
		}
		got, full, err := CheckBody(b)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if full != (n >= CheckedHeaderLen) {
			t.Fatalf("n=%d: full=%v", n, full)
		}
		want := key
		if n < 9 { // a short body keeps the key's low n-1 bytes
			want &= 1<<(8*uint(n-1)) - 1
		}
		if got != want {
			t.Fatalf("n=%d: key %#x, want %#x", n, got, want)
		}
		if !BodyEqual(b, key, n) {
			t.Fatalf("n=%d: BodyEqual false on its own body", n)
		}
		if !bytes.Equal(b, AppendBody(nil, key, n)) {
			t.Fatalf("n=%d: not deterministic", n)
		}
	}
}

// The layout is a contract with tools outside this package (stormbench, the soak):
// pin it in hex.
func TestCheckedBodyLayout(t *testing.T) {
	if got := hex.EncodeToString(AppendBody(nil, 0xAABBCCDD, 3)); got != "e3ccdd" {
		t.Fatalf("short body = %s", got)
	}
	if got := hex.EncodeToString(AppendBody(nil, 0xAABBCCDD, 11)); got != "eb000000000000aabbccdd" {
		t.Fatalf("short body with padding = %s", got)
	}
	b := AppendBody(nil, 7, 24)
	if got := hex.EncodeToString(b[:12]); got != "000000180000000000000007" {
		t.Fatalf("full body header = %s", got)
	}
}

func TestCheckBodyDetectsDamage(t *testing.T) {
	a := AppendBody(nil, 1, 1000)
	b := AppendBody(nil, 2, 1000)
	splice := append(append([]byte{}, a[:500]...), b[500:]...)
	if _, _, err := CheckBody(splice); !errors.Is(err, ErrBodyChecksum) {
		t.Errorf("splice of two bodies: %v", err)
	}
	if BodyEqual(splice, 1, 1000) || BodyEqual(splice, 2, 1000) {
		t.Error("BodyEqual accepted a splice")
	}
	if _, _, err := CheckBody(a[:999]); !errors.Is(err, ErrBodyLength) {
		t.Errorf("cut body: %v", err)
	}
	flip := append([]byte{}, a...)
	flip[700] ^= 1
	if _, _, err := CheckBody(flip); !errors.Is(err, ErrBodyChecksum) {
		t.Errorf("one bit flipped: %v", err)
	}
	if BodyEqual(flip, 1, 1000) {
		t.Error("BodyEqual accepted a flipped bit")
	}
	crc := append([]byte{}, a...)
	crc[13] ^= 1
	if BodyEqual(crc, 1, 1000) {
		t.Error("BodyEqual accepted a damaged checksum field")
	}
	if _, _, err := CheckBody(AppendBody(nil, 1, 5)[:3]); !errors.Is(err, ErrBodyForm) {
		t.Errorf("cut short body: %v", err)
	}
	if _, _, err := CheckBody(append(AppendBody(nil, 1, 5), a...)); !errors.Is(err, ErrBodyLength) {
		t.Errorf("short body followed by another: %v", err)
	}
	if _, _, err := CheckBody(nil); !errors.Is(err, ErrBodyEmpty) {
		t.Errorf("empty: %v", err)
	}
	if BodyEqual(a, 1, 999) || BodyEqual(a, 3, 1000) {
		t.Error("BodyEqual ignored the size or the key")
	}
}

func TestSparseSet(t *testing.T) {
	var s sparseSet
	for _, x := range []uint64{0, 1, 63, 64, 4095, 4096, 1 << 40, ^uint64(0)} {
		if !s.add(x) {
			t.Fatalf("%d: not new", x)
		}
		if s.add(x) {
			t.Fatalf("%d: new twice", x)
		}
	}
	if s.len() != 8 {
		t.Fatalf("len %d", s.len())
	}
}
