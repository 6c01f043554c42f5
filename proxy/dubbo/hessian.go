package dubbo

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// hessian2 string grammar (length counts UTF-16 code units, data is UTF-8 per unit):
//
//	string ::= 'R' b1 b0 <utf8-data> string  # non-final chunk
//	       ::= 'S' b1 b0 <utf8-data>         # final chunk, 0-65535 units
//	       ::= [x00-x1f] <utf8-data>         # 0-31 units
//	       ::= [x30-x33] b0 <utf8-data>      # 0-1023 units
const (
	hessianChunk     = 'R'
	hessianFinal     = 'S'
	hessianDirectMax = 0x1f
	hessianShort     = 0x30
	hessianShortMax  = 0x3ff
	// hessianChunkUnits is the chunk size Java's Hessian2Output uses.
	hessianChunkUnits = 0x8000
)

// Errors returned by the hessian2 readers.
var (
	ErrTruncated = errors.New("dubbo: truncated hessian2 value")
	ErrNotString = errors.New("dubbo: hessian2 value is not a string")
	ErrBadUTF8   = errors.New("dubbo: malformed utf-8 in hessian2 string")
)

// AppendHessianString appends s as a hessian2 string exactly as Java's
// Hessian2Output.writeString does: one length-prefixed final chunk when s has at most
// 32768 UTF-16 code units (short form below 32, two-byte form below 1024, 'S' above),
// otherwise 'R' chunks of 32768 units (32767 when a surrogate pair would straddle)
// followed by a final chunk. Characters outside the BMP are written as two 3-byte
// surrogates (CESU-8), the only form Java's Hessian2Input reads. Invalid UTF-8 bytes in
// s are written as U+FFFD. It allocates only when dst must grow.
func AppendHessianString(dst []byte, s string) []byte {
	units := utf16Len(s)
	for units > hessianChunkUnits {
		end, n := chunkPrefix(s, hessianChunkUnits)
		dst = append(dst, hessianChunk, byte(n>>8), byte(n))
		dst = appendJavaUTF8(dst, s[:end])
		s = s[end:]
		units -= n
	}
	switch {
	case units <= hessianDirectMax:
		dst = append(dst, byte(units))
	case units <= hessianShortMax:
		dst = append(dst, byte(hessianShort+units>>8), byte(units))
	default:
		dst = append(dst, hessianFinal, byte(units>>8), byte(units))
	}
	return appendJavaUTF8(dst, s)
}

// utf16Len counts the UTF-16 code units of s, an invalid byte counting as one U+FFFD.
func utf16Len(s string) int {
	n := len(s) // every byte counts one unit until shown otherwise
	for i := 0; i < len(s); {
		if i = skipASCII(s, i); i == len(s) {
			break
		}
		_, size := utf8.DecodeRuneInString(s[i:])
		switch size {
		case 2:
			n--
		case 3:
			n -= 2
		case 4:
			n -= 2 // four bytes, two units
		}
		i += size
	}
	return n
}

// chunkPrefix returns the byte length and unit count of the longest prefix of s
// holding at most max UTF-16 units without splitting a surrogate pair.
func chunkPrefix(s string, max int) (end, units int) {
	for end < len(s) {
		w, size := 1, 1
		if s[end] >= utf8.RuneSelf {
			_, size = utf8.DecodeRuneInString(s[end:])
			if size == 4 {
				w = 2
			}
		}
		if units+w > max {
			break
		}
		units += w
		end += size
	}
	return end, units
}

// appendJavaUTF8 appends s encoded one UTF-16 unit at a time (what Java's printString
// does): identical to UTF-8 inside the BMP, so runs of BMP text are copied as they
// are; characters above the BMP become two 3-byte surrogates and invalid bytes U+FFFD.
func appendJavaUTF8(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		if i = skipASCII(s, i); i == len(s) {
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, 0xef, 0xbf, 0xbd) // U+FFFD
		case size == 4:
			dst = append(dst, s[start:i]...)
			r -= 0x10000
			dst = append3(dst, 0xd800+r>>10)
			dst = append3(dst, 0xdc00+r&0x3ff)
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(dst, s[start:]...)
}

// skipASCII returns the index of the first non-ASCII byte of s at or after i, or
// len(s). It tests eight bytes at a time: error messages are mostly ASCII.
func skipASCII(s string, i int) int {
	for ; i+8 <= len(s); i += 8 {
		if (s[i]|s[i+1]|s[i+2]|s[i+3]|s[i+4]|s[i+5]|s[i+6]|s[i+7])&0x80 != 0 {
			break
		}
	}
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	return i
}

// append3 appends the 3-byte form of the 16-bit unit u.
func append3(dst []byte, u rune) []byte {
	return append(dst, byte(0xe0|u>>12), byte(0x80|(u>>6)&0x3f), byte(0x80|u&0x3f))
}

// ReadHessianString decodes the hessian2 string (or null) at the start of b and returns it
// with n, the number of bytes it occupies. Null ('N') decodes as "" with n = 1.
// It reads all four string forms, chunks included, one UTF-16 unit per 1-3 byte sequence
// (surrogate pairs are joined, lone surrogates become U+FFFD, overlong forms are
// accepted as Java accepts them); a 4-byte UTF-8 sequence is also accepted, counting
// two units. A non-string tag yields ErrNotString, a short input ErrTruncated, a bad
// byte sequence ErrBadUTF8. It never panics; it allocates once for a non-empty result
// and never more than the input bytes justify.
func ReadHessianString(b []byte) (s string, n int, err error) {
	if len(b) > 0 && b[0] == hessianNull {
		return "", 1, nil
	}
	sc, err := scanHessianString(b, nil)
	if err != nil {
		return "", 0, err
	}
	if sc.outLen == 0 {
		return "", sc.end, nil
	}
	if sc.chunks == 1 && sc.canonical {
		// The data bytes are already the Go string.
		return string(b[sc.dataStart:sc.end]), sc.end, nil
	}
	var sb strings.Builder
	sb.Grow(sc.outLen)
	if _, err := scanHessianString(b, &sb); err != nil {
		return "", 0, err // unreachable: the first pass accepted b
	}
	return sb.String(), sc.end, nil
}

// skipHessianString returns the encoded length of the string or null at the start of b
// without building it.
func skipHessianString(b []byte) (int, error) {
	if len(b) > 0 && b[0] == hessianNull {
		return 1, nil
	}
	sc, err := scanHessianString(b, nil)
	return sc.end, err
}

// stringScan is what one pass over an encoded string learns.
type stringScan struct {
	end       int  // bytes occupied by the encoded string
	outLen    int  // bytes of the decoded UTF-8 string
	chunks    int  // number of chunks
	dataStart int  // offset of the first chunk's data
	canonical bool // every sequence is valid, shortest-form UTF-8 (no surrogates)
}

// scanHessianString walks the string at the start of b, writing the decoded text to
// out when out is not nil. Every length is checked against len(b) before use.
func scanHessianString(b []byte, out *strings.Builder) (stringScan, error) {
	sc := stringScan{canonical: true}
	pos := 0
	var high rune // pending high surrogate, 0 if none
	emit := func(r rune) {
		sc.outLen += utf8.RuneLen(r)
		if out != nil {
			out.WriteRune(r)
		}
	}
	for {
		if pos >= len(b) {
			return sc, ErrTruncated
		}
		tag := b[pos]
		final := true
		var units int
		switch {
		case tag <= hessianDirectMax:
			units = int(tag)
			pos++
		case tag >= hessianShort && tag <= hessianShort+3:
			if pos+2 > len(b) {
				return sc, ErrTruncated
			}
			units = int(tag-hessianShort)<<8 | int(b[pos+1])
			pos += 2
		case tag == hessianFinal || tag == hessianChunk:
			if pos+3 > len(b) {
				return sc, ErrTruncated
			}
			units = int(b[pos+1])<<8 | int(b[pos+2])
			pos += 3
			final = tag == hessianFinal
		default:
			return sc, ErrNotString
		}
		if sc.chunks == 0 {
			sc.dataStart = pos
		}
		sc.chunks++
		for units > 0 {
			if pos >= len(b) {
				return sc, ErrTruncated
			}
			c := b[pos]
			if c < utf8.RuneSelf && high == 0 {
				// ASCII run: copy in bulk.
				j := pos + 1
				for j < len(b) && j-pos < units && b[j] < utf8.RuneSelf {
					j++
				}
				sc.outLen += j - pos
				if out != nil {
					out.Write(b[pos:j])
				}
				units -= j - pos
				pos = j
				continue
			}
			r, w, u, canon, err := decodeUnit(b[pos:])
			if err != nil {
				return sc, err
			}
			if u > units {
				return sc, ErrBadUTF8 // a 4-byte sequence straddles the chunk end
			}
			sc.canonical = sc.canonical && canon
			pos += w
			units -= u
			switch {
			case r >= 0xd800 && r <= 0xdbff:
				sc.canonical = false
				if high != 0 {
					emit(utf8.RuneError)
				}
				high = r
				continue
			case r >= 0xdc00 && r <= 0xdfff:
				sc.canonical = false
				if high != 0 {
					emit(0x10000 + (high-0xd800)<<10 + (r - 0xdc00))
					high = 0
				} else {
					emit(utf8.RuneError)
				}
				continue
			}
			if high != 0 {
				emit(utf8.RuneError)
				high = 0
			}
			emit(r)
		}
		if final {
			break
		}
	}
	if high != 0 {
		emit(utf8.RuneError)
	}
	sc.end = pos
	return sc, nil
}

// decodeUnit decodes one 1-4 byte sequence at the start of b (len(b) >= 1).
// It returns the code point, the bytes used, the UTF-16 units it stands for, and
// whether the sequence is shortest-form UTF-8.
func decodeUnit(b []byte) (r rune, w, units int, canonical bool, err error) {
	c := b[0]
	switch {
	case c < 0x80:
		return rune(c), 1, 1, true, nil
	case c&0xe0 == 0xc0:
		if len(b) < 2 {
			return 0, 0, 0, false, ErrTruncated
		}
		if b[1]&0xc0 != 0x80 {
			return 0, 0, 0, false, ErrBadUTF8
		}
		r = rune(c&0x1f)<<6 | rune(b[1]&0x3f)
		return r, 2, 1, r >= 0x80, nil
	case c&0xf0 == 0xe0:
		if len(b) < 3 {
			return 0, 0, 0, false, ErrTruncated
		}
		if b[1]&0xc0 != 0x80 || b[2]&0xc0 != 0x80 {
			return 0, 0, 0, false, ErrBadUTF8
		}
		r = rune(c&0x0f)<<12 | rune(b[1]&0x3f)<<6 | rune(b[2]&0x3f)
		return r, 3, 1, r >= 0x800, nil
	case c&0xf8 == 0xf0:
		if len(b) < 4 {
			return 0, 0, 0, false, ErrTruncated
		}
		if b[1]&0xc0 != 0x80 || b[2]&0xc0 != 0x80 || b[3]&0xc0 != 0x80 {
			return 0, 0, 0, false, ErrBadUTF8
		}
		r = rune(c&0x07)<<18 | rune(b[1]&0x3f)<<12 | rune(b[2]&0x3f)<<6 | rune(b[3]&0x3f)
		if r < 0x10000 || r > utf8.MaxRune {
			return 0, 0, 0, false, ErrBadUTF8
		}
		return r, 4, 2, true, nil
	}
	return 0, 0, 0, false, ErrBadUTF8
}
