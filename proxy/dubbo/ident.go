package dubbo

import (
	"bytes"
	"encoding/binary"
	"unicode/utf8"
)

// Call is what a request calls: the service path (interface), its version and group,
// and the method. Each field is the UTF-8 text of a name, a slice of the frame it was
// read from (valid as long as that frame is), never longer than MaxNameLen bytes and
// never holding a control character or invalid UTF-8, so it can be a Prometheus label
// value as it is. Version and Group are empty when the request names none (a null,
// an empty string, or Dubbo's "0.0.0", which its providers treat as no version).
type Call struct {
	Service, Version, Group, Method []byte
}

// MaxNameLen bounds each name IdentifyRequest returns, in bytes. A longer one is
// not a name any Dubbo consumer writes, and the request is not identified.
const MaxNameLen = 255

// attachTail is how many bytes at the end of a body IdentifyRequest searches for the
// group attachment. Attachments come last in a request and are a few hundred bytes
// (path, interface, version, group, timeout, tracing headers); the arguments before
// them can be megabytes, which a search from the end never reads.
const attachTail = 4096

// dubboVersionMax bounds the protocol version string ("2.0.2").
const dubboVersionMax = 32

// genericInvoke and genericInvokeAsync are Dubbo's generic call methods
// (GenericService.$invoke): the method actually called is their first argument.
var (
	genericInvoke      = []byte("$invoke")
	genericInvokeAsync = []byte("$invokeAsync")
	groupKey           = []byte("\x05group")
	defaultVersion     = []byte(defaultServiceVersion)
)

// IdentifyRequest reads what a whole request frame (header included) calls, as Java's
// DubboCodec.encodeRequestData, dubbo-go and dubbo-js write it: the hessian2 strings
// at the start of the body (dubbo protocol version, service path, service version,
// method) and the "group" attachment, found in the last attachTail bytes of the body.
// For Dubbo's generic calls ($invoke, $invokeAsync) Method is the method named by the
// call's first argument. It reports false, leaving c unspecified, for anything else:
// another serialization than hessian2, a body that does not start like a Dubbo request,
// a name over MaxNameLen bytes, split in chunks, or holding a control character or
// invalid UTF-8. A group it cannot find or read is left empty.
//
// It reads at most the four leading strings (plus, for a generic call, the parameter
// descriptor and the first argument) and the body's last attachTail bytes, never
// allocates, and never panics on any input.
func IdentifyRequest(frame []byte, c *Call) bool {
	if len(frame) <= HeaderLen || frame[2]&SerialMask != SerialHessian2 || frame[2]&FlagRequest == 0 {
		return false
	}
	body := frame[HeaderLen:]
	ver, pos, ok := nameAt(body, 0, false)
	if !ok || len(ver) == 0 || len(ver) > dubboVersionMax || ver[0] < '0' || ver[0] > '9' {
		return false
	}
	if c.Service, pos, ok = nameAt(body, pos, false); !ok || len(c.Service) == 0 {
		return false
	}
	if c.Version, pos, ok = nameAt(body, pos, true); !ok {
		return false
	}
	if bytes.Equal(c.Version, defaultVersion) {
		c.Version = nil
	}
	if c.Method, pos, ok = nameAt(body, pos, false); !ok || len(c.Method) == 0 {
		return false
	}
	// The parameter descriptor: the arguments, then the attachments, follow it.
	args := pos
	if _, next, ok := nameAt(body, pos, false); ok {
		args = next
	}
	if bytes.Equal(c.Method, genericInvoke) || bytes.Equal(c.Method, genericInvokeAsync) {
		// The descriptor (Ljava/lang/String;[Ljava/lang/String;[Ljava/lang/Object;), then
		// the method name. A generic call written some other way keeps its own name.
		if m, _, ok := nameAt(body, args, false); ok && args > pos && len(m) > 0 {
			c.Method = m
		}
	}
	c.Group = nil
	if g, ok := requestAttachment(body, args, groupKey); ok {
		c.Group = g
	}
	return true
}

// nameAt reads the hessian2 string at body[pos:] as a name: a single chunk of at most
// MaxNameLen bytes of printable UTF-8 within the Basic Multilingual Plane (so that
// its hessian length, in UTF-16 units, is its number of runes). A null is accepted,
// as an empty name, when nullOK. It returns the text and the position after it.
func nameAt(body []byte, pos int, nullOK bool) (name []byte, next int, ok bool) {
	if pos >= len(body) {
		return nil, 0, false
	}
	b := body[pos:]
	var units, start int
	switch t := b[0]; {
	case t == hessianNull && nullOK:
		return nil, pos + 1, true
	case t <= hessianDirectMax:
		units, start = int(t), 1
	case t >= hessianShort && t <= hessianShort+3 && len(b) >= 2:
		units, start = int(t-hessianShort)<<8|int(b[1]), 2
	case t == hessianFinal && len(b) >= 3:
		units, start = int(b[1])<<8|int(b[2]), 3
	default:
		return nil, 0, false
	}
	if units > MaxNameLen {
		return nil, 0, false
	}
	if end := start + units; end <= len(b) && printableASCII(b, start, end) { // the common case
		return b[start:end], pos + end, true
	}
	i := start
	for ; units > 0; units-- {
		if i >= len(b) {
			return nil, 0, false
		}
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return nil, 0, false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError || size == 4 || r < 0xa0 { // invalid, above the BMP, or a C1 control
			return nil, 0, false
		}
		i += size
	}
	if i-start > MaxNameLen {
		return nil, 0, false
	}
	return b[start:i], pos + i, true
}

// ResponseException reports whether a whole response frame is an OK hessian2 answer
// carrying an exception thrown by the called method (DubboCodec's body types
// RESPONSE_WITH_EXCEPTION and RESPONSE_WITH_EXCEPTION_WITH_ATTACHMENTS): Dubbo's
// business exceptions, which travel with status OK. It reads one body byte.
func ResponseException(frame []byte) bool {
	return len(frame) > HeaderLen && frame[2]&SerialMask == SerialHessian2 && frame[3] == StatusOK &&
		(frame[HeaderLen] == respWithException || frame[HeaderLen] == respWithExceptionAttachments)
}

// printableASCII reports whether b[start:end] is printable ASCII, eight bytes at a
// time; a name shorter than eight bytes is read as one word when b has room after it.
func printableASCII(b []byte, start, end int) bool {
	const spaces = 0x2020202020202020
	n := end - start
	switch {
	case n >= 8:
		for i := start; i+8 <= end; i += 8 {
			if !printableASCII8(binary.LittleEndian.Uint64(b[i:])) {
				return false
			}
		}
		return printableASCII8(binary.LittleEndian.Uint64(b[end-8:]))
	case start+8 <= len(b):
		mask := uint64(1)<<(8*n) - 1 // the name's bytes; the rest count as spaces
		return printableASCII8(binary.LittleEndian.Uint64(b[start:])&mask | spaces&^mask)
	}
	for _, c := range b[start:end] {
		if c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// printableASCII8 reports whether the eight bytes of w are all printable ASCII
// (0x20-0x7e), eight at a time: names are ASCII, and this is most of IdentifyRequest's
// work. With no byte at or above 0x80, w-0x20.. borrows into a byte's top bit exactly
// when some byte is below 0x20, and w+0x01.. sets a top bit exactly for a 0x7f.
func printableASCII8(w uint64) bool {
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	return w&tops == 0 && (w-0x20*ones)&^w&tops == 0 && (w+ones)&tops == 0
}
