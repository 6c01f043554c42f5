package dubbo

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// ClosingAttachment reports whether a whole response frame carries the attachment
// closing=true, which dubbo-go providers from v3.3.2 put on every answer once their
// graceful shutdown has begun (filter/graceful_shutdown provider_filter.go OnResponse,
// constant.GracefulShutdownClosingKey). Only an OK, hessian2 response whose body type
// carries attachments (0x93-0x95) can; the value before the attachments is skipped
// structurally, so a returned value that merely contains the same bytes is not
// mistaken for the attachment.
//
// Cost: one substring search over the body; the structural walk runs only when the
// bytes of the key occur. It never allocates and never panics; a body it cannot walk
// (malformed, nested deeper than 32 levels, more than 256 class definitions) reports
// false.
func ClosingAttachment(frame []byte) bool {
	body, ok := hessianResponseBody(frame)
	if !ok || frame[3] != StatusOK {
		return false
	}
	switch body[0] {
	case respWithExceptionAttachments, respValueAttachments, respNullValueAttachments:
	default:
		return false
	}
	if !bytes.Contains(body, closingKey) {
		return false
	}
	var sk skipper
	pos := 1
	if body[0] != respNullValueAttachments {
		n, err := sk.value(body[pos:], 0)
		if err != nil {
			return false
		}
		pos += n
	}
	return sk.mapHasString(body[pos:], closingKey, closingTrue)
}

// closingKey and closingTrue are the hessian2 strings "closing" and "true".
var (
	closingKey  = []byte("\x07closing")
	closingTrue = []byte("\x04true")
)

var errHessian = errors.New("dubbo: malformed or unsupported hessian2 value")

// skipper walks hessian2 values without building them. Class definitions are
// numbered in the order they appear in one body, so it remembers each one's field
// count (up to maxClassDefs).
type skipper struct {
	fields [maxClassDefs]uint16
	n      int
}

const (
	maxClassDefs = 256
	maxDepth     = 32
)

// mapHasString reports whether b starts with an untyped map ('H' ... 'Z') holding
// the entry key -> val, both given encoded.
func (sk *skipper) mapHasString(b, key, val []byte) bool {
	if len(b) == 0 || b[0] != 'H' {
		return false
	}
	pos := 1
	for pos < len(b) && b[pos] != 'Z' {
		k, err := sk.value(b[pos:], 1)
		if err != nil {
			return false
		}
		isKey := bytes.Equal(b[pos:pos+k], key)
		pos += k
		v, err := sk.value(b[pos:], 1)
		if err != nil {
			return false
		}
		if isKey {
			return bytes.Equal(b[pos:pos+v], val)
		}
		pos += v
	}
	return false
}

// value returns the encoded length of the hessian2 value at the start of b.
func (sk *skipper) value(b []byte, depth int) (int, error) {
	if len(b) == 0 || depth > maxDepth {
		return 0, errHessian
	}
	t := b[0]
	switch {
	case t <= 0x1f, t >= 0x30 && t <= 0x33, t == 'R', t == 'S': // string
		return skipHessianString(b)
	case t >= 0x20 && t <= 0x2f: // binary, 0-15 bytes
		return need(b, 1+int(t-0x20))
	case t >= 0x34 && t <= 0x37: // binary, 0-1023 bytes
		if len(b) < 2 {
			return 0, errHessian
		}
		return need(b, 2+(int(t-0x34)<<8|int(b[1])))
	case t == 'A' || t == 'B': // binary chunks
		pos := 0
		for {
			if pos+3 > len(b) {
				return 0, errHessian
			}
			c := b[pos]
			if c != 'A' && c != 'B' {
				return 0, errHessian
			}
			pos += 3 + int(binary.BigEndian.Uint16(b[pos+1:]))
			if pos > len(b) {
				return 0, errHessian
			}
			if c == 'B' {
				return pos, nil
			}
		}
	case t >= 0x38 && t <= 0x3f: // long, 3 bytes
		return need(b, 3)
	case t == 'N', t == 'T', t == 'F', t == 0x5b, t == 0x5c: // null, true, false, double 0.0 and 1.0
		return 1, nil
	case t >= 0x80 && t <= 0xbf, t >= 0xd8 && t <= 0xef: // compact int, compact long
		return 1, nil
	case t >= 0xc0 && t <= 0xcf, t >= 0xf0: // two-byte int, two-byte long
		return need(b, 2)
	case t >= 0xd0 && t <= 0xd7: // three-byte int
		return need(b, 3)
	case t == 0x5d: // double as byte
		return need(b, 2)
	case t == 0x5e: // double as short
		return need(b, 3)
	case t == 'I', t == 'K', t == 'Y', t == 0x5f: // int, date in minutes, long as int, double as float
		return need(b, 5)
	case t == 'L', t == 'J', t == 'D': // long, date, double
		return need(b, 9)
	case t == 'Q': // reference to an earlier value
		n, _, err := sk.int(b[1:])
		return 1 + n, err
	case t == 'C': // class definition, then the value that follows it
		n, err := sk.classDef(b)
		if err != nil {
			return 0, err
		}
		m, err := sk.value(b[n:], depth)
		return n + m, err
	case t == 'O' || t >= 0x60 && t <= 0x6f: // object instance
		pos, ref := 1, int(t-0x60)
		if t == 'O' {
			n, v, err := sk.int(b[1:])
			if err != nil {
				return 0, err
			}
			pos, ref = 1+n, v
		}
		if ref < 0 || ref >= sk.n {
			return 0, errHessian
		}
		return sk.values(b, pos, int(sk.fields[ref]), depth)
	case t == 'H': // untyped map
		return sk.untilZ(b, 1, depth)
	case t == 'M': // typed map
		n, err := sk.typ(b[1:])
		if err != nil {
			return 0, err
		}
		return sk.untilZ(b, 1+n, depth)
	case t == 'U': // typed variable-length list
		n, err := sk.typ(b[1:])
		if err != nil {
			return 0, err
		}
		return sk.untilZ(b, 1+n, depth)
	case t == 'W': // untyped variable-length list
		return sk.untilZ(b, 1, depth)
	case t == 'V': // typed fixed-length list
		n, err := sk.typ(b[1:])
		if err != nil {
			return 0, err
		}
		m, count, err := sk.int(b[1+n:])
		if err != nil {
			return 0, err
		}
		return sk.values(b, 1+n+m, count, depth)
	case t == 'X': // untyped fixed-length list
		m, count, err := sk.int(b[1:])
		if err != nil {
			return 0, err
		}
		return sk.values(b, 1+m, count, depth)
	case t >= 0x70 && t <= 0x77: // typed fixed-length list, length in the tag
		n, err := sk.typ(b[1:])
		if err != nil {
			return 0, err
		}
		return sk.values(b, 1+n, int(t-0x70), depth)
	case t >= 0x78 && t <= 0x7f: // untyped fixed-length list, length in the tag
		return sk.values(b, 1, int(t-0x78), depth)
	}
	return 0, errHessian
}

// values skips count values starting at b[pos:], returning the end offset. Every
// value takes at least one byte, so a huge count fails on the input's end, not on time.
func (sk *skipper) values(b []byte, pos, count, depth int) (int, error) {
	if count < 0 {
		return 0, errHessian
	}
	for ; count > 0; count-- {
		n, err := sk.value(b[min(pos, len(b)):], depth+1)
		if err != nil {
			return 0, err
		}
		pos += n
	}
	return pos, nil
}

// untilZ skips values from b[pos:] up to and including the terminating 'Z'.
func (sk *skipper) untilZ(b []byte, pos, depth int) (int, error) {
	for {
		if pos >= len(b) {
			return 0, errHessian
		}
		if b[pos] == 'Z' {
			return pos + 1, nil
		}
		n, err := sk.value(b[pos:], depth+1)
		if err != nil {
			return 0, err
		}
		pos += n
	}
}

// classDef skips 'C' type-name field-count field-names and records the count.
func (sk *skipper) classDef(b []byte) (int, error) {
	if sk.n == maxClassDefs {
		return 0, errHessian
	}
	pos := 1
	n, err := skipHessianString(b[pos:])
	if err != nil {
		return 0, errHessian
	}
	pos += n
	n, count, err := sk.int(b[pos:])
	if err != nil || count < 0 || count > 0xffff {
		return 0, errHessian
	}
	pos += n
	for range count {
		n, err := skipHessianString(b[min(pos, len(b)):])
		if err != nil {
			return 0, errHessian
		}
		pos += n
	}
	sk.fields[sk.n] = uint16(count)
	sk.n++
	return pos, nil
}

// typ skips a list or map type: a string, or an int referring to an earlier type.
func (sk *skipper) typ(b []byte) (int, error) {
	if len(b) > 0 && (b[0] <= 0x1f || b[0] >= 0x30 && b[0] <= 0x33 || b[0] == 'R' || b[0] == 'S') {
		n, err := skipHessianString(b)
		if err != nil {
			return 0, errHessian
		}
		return n, nil
	}
	n, _, err := sk.int(b)
	return n, err
}

// int reads a hessian2 int in any of its forms.
func (sk *skipper) int(b []byte) (n, v int, err error) {
	if len(b) == 0 {
		return 0, 0, errHessian
	}
	switch t := b[0]; {
	case t >= 0x80 && t <= 0xbf:
		return 1, int(t) - 0x90, nil
	case t >= 0xc0 && t <= 0xcf:
		if len(b) < 2 {
			return 0, 0, errHessian
		}
		return 2, (int(t)-0xc8)<<8 | int(b[1]), nil
	case t >= 0xd0 && t <= 0xd7:
		if len(b) < 3 {
			return 0, 0, errHessian
		}
		return 3, (int(t)-0xd4)<<16 | int(b[1])<<8 | int(b[2]), nil
	case t == 'I':
		if len(b) < 5 {
			return 0, 0, errHessian
		}
		return 5, int(int32(binary.BigEndian.Uint32(b[1:]))), nil
	}
	return 0, 0, errHessian
}

func need(b []byte, n int) (int, error) {
	if n > len(b) {
		return 0, errHessian
	}
	return n, nil
}
