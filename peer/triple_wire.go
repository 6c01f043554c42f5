package peer

// Triple messages as dubbo-go v3.3.0 sends them without IDL (protocol/triple/triple_protocol: the
// protoWrapperCodec around the hessian2 codec): a gRPC length-prefixed message whose payload is the
// protobuf TripleRequestWrapper {serializeType = "hessian2", args = [hessian2 of each argument],
// argTypes = [Java type of each]}, sent with content-type application/grpc+hessian2 (the codec's name
// after "application/grpc+"). A checked body travels as one byte[] argument ("[B", a hessian2 binary),
// so the bytes on the wire are what a dubbo-go consumer calling Echo([]byte) would send; a String
// argument is the template of `stormbench load` without checked bodies.

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"
)

// TripleContentType is the content-type of a non-IDL hessian2 Triple call (dubbo-go v3.3.0).
const TripleContentType = "application/grpc+hessian2"

// GRPCPrefixLen is the length of a gRPC message's prefix: a compressed flag and a 4-byte length.
const GRPCPrefixLen = 5

const (
	pbSerializeType = 0x0a // field 1, length-delimited
	pbArgs          = 0x12 // field 2
	pbArgTypes      = 0x1a // field 3
	hessianName     = "hessian2"
	argTypeBinary   = "[B"
	argTypeString   = "java.lang.String"
	hessianChunk    = 0x8000 // the chunk size Java's Hessian2Output and dubbo-go-hessian2 use
)

// MaxTripleString is the longest String argument AppendTripleString encodes, in UTF-16 units (one
// hessian2 chunk; longer strings would need chunking, which nothing here needs).
const MaxTripleString = 0xffff

// Errors of TripleBody.
var (
	ErrTripleMessage = errors.New("peer: not a gRPC message holding a TripleRequestWrapper")
	ErrTripleArg     = errors.New("peer: the Triple argument is not one hessian2 byte[]")
)

// AppendTripleBody appends the whole gRPC message (prefix included) of a Triple call whose one argument
// is the checked body (key, n) as a byte[]. The same key and n always give the same bytes, so an echo
// is checked by rebuilding it.
func AppendTripleBody(dst []byte, key uint64, n int) []byte {
	hlen := hessianBinaryLen(n)
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = appendPBString(dst, pbSerializeType, hessianName)
	dst = append(dst, pbArgs)
	dst = binary.AppendUvarint(dst, uint64(hlen))
	bodyAt := len(dst)
	dst = AppendBody(dst, key, n)
	dst = chunkHessianBinary(dst, bodyAt, n)
	dst = appendPBString(dst, pbArgTypes, argTypeBinary)
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-GRPCPrefixLen))
	return dst
}

// AppendTripleString appends the whole gRPC message of a Triple call with one String argument s (at
// most MaxTripleString UTF-16 units; longer panics: check with TripleStringOK).
func AppendTripleString(dst []byte, s string) []byte {
	units := utf16Len(s)
	if units > MaxTripleString {
		panic("peer: Triple string argument too long")
	}
	var h []byte
	switch {
	case units < 32:
		h = append(h, byte(units))
	case units < 1024:
		h = append(h, 0x30+byte(units>>8), byte(units))
	default:
		h = append(h, 'S', byte(units>>8), byte(units))
	}
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = appendPBString(dst, pbSerializeType, hessianName)
	dst = append(dst, pbArgs)
	dst = binary.AppendUvarint(dst, uint64(len(h)+len(s)))
	dst = append(append(dst, h...), s...)
	dst = appendPBString(dst, pbArgTypes, argTypeString)
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-GRPCPrefixLen))
	return dst
}

// TripleStringOK reports whether AppendTripleString takes s.
func TripleStringOK(s string) bool { return utf16Len(s) <= MaxTripleString }

// TripleBody reads a gRPC message built like AppendTripleBody's (prefix included, uncompressed) and
// returns its byte[] argument, decoded from hessian2 into scratch (appended). ErrTripleMessage: the
// prefix, the protobuf or the serialization is wrong; ErrTripleArg: the call's argument is not one
// byte[] (a String call, say). It never panics.
func TripleBody(msg, scratch []byte) ([]byte, error) {
	if len(msg) < GRPCPrefixLen || msg[0] != 0 || int(binary.BigEndian.Uint32(msg[1:5])) != len(msg)-GRPCPrefixLen {
		return scratch, ErrTripleMessage
	}
	b := msg[GRPCPrefixLen:]
	var serial, argType string
	var arg []byte
	nargs, ntypes := 0, 0
	for len(b) > 0 {
		tag := b[0]
		l, k := binary.Uvarint(b[1:])
		if k <= 0 || l > uint64(len(b)-1-k) {
			return scratch, ErrTripleMessage
		}
		v := b[1+k : 1+k+int(l)]
		b = b[1+k+int(l):]
		switch tag {
		case pbSerializeType:
			serial = string(v)
		case pbArgs:
			arg = v
			nargs++
		case pbArgTypes:
			argType = string(v)
			ntypes++
		default:
			return scratch, ErrTripleMessage
		}
	}
	if serial != hessianName {
		return scratch, ErrTripleMessage
	}
	if nargs != 1 || ntypes != 1 || argType != argTypeBinary {
		return scratch, ErrTripleArg
	}
	return decodeHessianBinary(arg, scratch)
}

func appendPBString(dst []byte, tag byte, s string) []byte {
	dst = append(dst, tag)
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// hessianBinaryLen is the encoded length of an n-byte hessian2 binary (chunkHessianBinary's output).
func hessianBinaryLen(n int) int {
	full := (n - 1) / hessianChunk // non-final chunks ('A'); the final one holds 1..hessianChunk bytes
	last := n - full*hessianChunk
	h := 3
	switch {
	case last <= 15:
		h = 1
	case last <= 1023:
		h = 2
	}
	return full*(3+hessianChunk) + h + last
}

// chunkHessianBinary turns the n raw bytes at dst[at:] into a hessian2 binary in place (growing dst):
// non-final chunks of hessianChunk bytes tagged 'A' with a 16-bit length, then the final chunk in the
// shortest form (0x20+len for up to 15 bytes, 0x34 + 2-byte length up to 1,023, else 'B'), as
// dubbo-go-hessian2's encBinary writes it.
func chunkHessianBinary(dst []byte, at, n int) []byte {
	total := hessianBinaryLen(n)
	dst = append(dst, make([]byte, total-n)...)
	// Move the chunks from the end backwards so no byte is overwritten before it is moved.
	src, w := at+n, at+total
	full := (n - 1) / hessianChunk
	last := n - full*hessianChunk
	w -= last
	src -= last
	copy(dst[w:], dst[src:src+last])
	switch {
	case last <= 15:
		w--
		dst[w] = 0x20 + byte(last)
	case last <= 1023:
		w -= 2
		dst[w], dst[w+1] = 0x34+byte(last>>8), byte(last)
	default:
		w -= 3
		dst[w], dst[w+1], dst[w+2] = 'B', byte(last>>8), byte(last)
	}
	for range full {
		w -= hessianChunk
		src -= hessianChunk
		copy(dst[w:], dst[src:src+hessianChunk])
		w -= 3
		dst[w], dst[w+1], dst[w+2] = 'A', byte(hessianChunk>>8), byte(hessianChunk&0xff)
	}
	return dst
}

// decodeHessianBinary appends the bytes of the hessian2 binary b (which must be exactly one) to dst.
func decodeHessianBinary(b, dst []byte) ([]byte, error) {
	for {
		if len(b) == 0 {
			return dst, ErrTripleArg
		}
		tag := b[0]
		var l, h int
		final := true
		switch {
		case tag >= 0x20 && tag <= 0x2f:
			l, h = int(tag-0x20), 1
		case tag >= 0x34 && tag <= 0x37 && len(b) >= 2:
			l, h = int(tag-0x34)<<8|int(b[1]), 2
		case (tag == 'A' || tag == 'B') && len(b) >= 3:
			l, h, final = int(b[1])<<8|int(b[2]), 3, tag == 'B'
		default:
			return dst, ErrTripleArg
		}
		if len(b) < h+l {
			return dst, ErrTripleArg
		}
		dst = append(dst, b[h:h+l]...)
		b = b[h+l:]
		if final {
			if len(b) != 0 {
				return dst, ErrTripleArg
			}
			return dst, nil
		}
	}
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 && r <= utf8.MaxRune {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// Load PINGs: `stormbench load --protocol triple` marks the 8 bytes of every PING it sends with
// loadPingMark and a counter, so a provider behind Stormgate can tell a consumer's PING (which must
// never reach it) from Stormgate's own (a big-endian counter, whose first bytes are zero).
var loadPingMark = [4]byte{'s', 'b', 'l', 'd'}

// LoadPing returns the PING payload for a load consumer's PING number n.
func LoadPing(n uint32) (d [8]byte) {
	copy(d[:4], loadPingMark[:])
	binary.BigEndian.PutUint32(d[4:], n)
	return d
}

// IsLoadPing reports whether d is a LoadPing payload, and its number.
func IsLoadPing(d [8]byte) (n uint32, ok bool) {
	if [4]byte(d[:4]) != loadPingMark {
		return 0, false
	}
	return binary.BigEndian.Uint32(d[4:]), true
}
