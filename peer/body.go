package peer

// Checked bodies: request bodies that prove their own integrity, so that a proxy test
// can tell a body that arrived whole from one that was cut, spliced or swapped with
// another request's. The echo provider checks every body it reads; consumers compare
// each answer with the body they sent, byte for byte.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Checked body layout.
//
// Full form, n >= CheckedHeaderLen bytes:
//
//	[0:4)   n, uint32 big endian (so byte 0 is 0x00 for any body below 16 MiB)
//	[4:12)  key, uint64 big endian: unique per request in a run
//	[12:16) CRC-32C (Castagnoli) of bytes [0:12) followed by [16:n)
//	[16:n)  filler: a pseudo-random stream seeded by the key (BodyFiller)
//
// Short form, 1 <= n < CheckedHeaderLen bytes (too small for the full header):
//
//	[0]     0xE0 | n
//	[1:n)   the low n-1 bytes of the key zero-extended to 16 bytes, big endian (bodies
//	        over 9 bytes start with zero padding)
//
// A short body checks only its own length; its key is partial, so short bodies cannot
// be told apart from each other by content alone (a consumer still matches them by id).
const (
	CheckedHeaderLen = 16
	// MaxCheckedBody is the largest body AppendBody builds (the Dubbo default payload cap).
	MaxCheckedBody = 8 << 20
	shortTag       = 0xE0
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors from CheckBody.
var (
	ErrBodyEmpty    = errors.New("peer: empty body")
	ErrBodyLength   = errors.New("peer: body length field does not match the body")
	ErrBodyChecksum = errors.New("peer: body checksum mismatch")
	ErrBodyForm     = errors.New("peer: body is neither a full nor a short checked body")
)

// AppendBody appends the checked body of n bytes (1 <= n <= MaxCheckedBody) for key.
// The same key and n always give the same bytes.
func AppendBody(dst []byte, key uint64, n int) []byte {
	if n < 1 || n > MaxCheckedBody {
		panic(fmt.Sprintf("peer: checked body size %d out of 1..%d", n, MaxCheckedBody))
	}
	if n < CheckedHeaderLen {
		dst = append(dst, shortTag|byte(n))
		var k [16]byte
		binary.BigEndian.PutUint64(k[8:], key)
		return append(dst, k[16-(n-1):]...)
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = binary.BigEndian.AppendUint64(dst, key)
	dst = append(dst, 0, 0, 0, 0)
	dst = appendFiller(dst, key, n-CheckedHeaderLen)
	b := dst[start:]
	binary.BigEndian.PutUint32(b[12:16], bodyCRC(b))
	return dst
}

// CheckBody validates a checked body and returns its key (for a short body, only the
// bytes it carries) and whether it is in the full form. It never panics.
func CheckBody(b []byte) (key uint64, full bool, err error) {
	n := len(b)
	switch {
	case n == 0:
		return 0, false, ErrBodyEmpty
	case n < CheckedHeaderLen:
		if b[0] != shortTag|byte(n) {
			return 0, false, ErrBodyForm
		}
		for i, c := range b[1:] {
			if i < n-9 && c != 0 {
				return 0, false, ErrBodyForm // the zero padding of a long short body
			}
			key = key<<8 | uint64(c)
		}
		return key, false, nil
	case b[0]&0xF0 == shortTag:
		return 0, false, ErrBodyLength // a short form's tag on a longer body: cut or spliced
	}
	key = binary.BigEndian.Uint64(b[4:12])
	if int64(binary.BigEndian.Uint32(b[0:4])) != int64(n) {
		return key, true, ErrBodyLength
	}
	if binary.BigEndian.Uint32(b[12:16]) != bodyCRC(b) {
		return key, true, ErrBodyChecksum
	}
	return key, true, nil
}

// BodyEqual reports whether b is exactly the body AppendBody(nil, key, n) would build,
// without building it.
func BodyEqual(b []byte, key uint64, n int) bool {
	if len(b) != n || n < 1 {
		return false
	}
	if n < CheckedHeaderLen {
		var want [CheckedHeaderLen]byte
		return string(AppendBody(want[:0], key, n)) == string(b)
	}
	if binary.BigEndian.Uint32(b[0:4]) != uint32(n) || binary.BigEndian.Uint64(b[4:12]) != key {
		return false
	}
	g := filler{s: key}
	rest := b[CheckedHeaderLen:]
	for len(rest) >= 8 {
		if binary.LittleEndian.Uint64(rest) != g.next() {
			return false
		}
		rest = rest[8:]
	}
	if len(rest) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], g.next())
		if string(w[:len(rest)]) != string(rest) {
			return false
		}
	}
	// The filler matches, so the checksum does too unless bytes [12:16) were altered.
	return binary.BigEndian.Uint32(b[12:16]) == bodyCRC(b)
}

func bodyCRC(b []byte) uint32 {
	c := crc32.Update(0, castagnoli, b[0:12])
	return crc32.Update(c, castagnoli, b[16:])
}

// appendFiller appends n bytes of the key's pseudo-random stream.
func appendFiller(dst []byte, key uint64, n int) []byte {
	g := filler{s: key}
	for ; n >= 8; n -= 8 {
		dst = binary.LittleEndian.AppendUint64(dst, g.next())
	}
	if n > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], g.next())
		dst = append(dst, w[:n]...)
	}
	return dst
}

// filler is SplitMix64: fast, and distinct keys give unrelated streams.
type filler struct{ s uint64 }

func (f *filler) next() uint64 {
	f.s += 0x9e3779b97f4a7c15
	z := f.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
