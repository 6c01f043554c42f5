package dubbo

import (
	"bytes"
	"time"
)

// MaxBelievedTimeout bounds the consumer timeout RequestTimeout reports: a larger
// value is not believed (a garbled or hostile attachment must not make Stormgate hold
// a request for days). The proxy bounds it further with its own settings.
const MaxBelievedTimeout = 24 * time.Hour

// RequestTimeout returns the consumer's own timeout for a whole two-way request
// frame: the `timeout` attachment, which every mainstream Dubbo 2 client sends with
// each request in milliseconds:
//   - Java Dubbo 2.7.10+ and 3.x: DubboInvoker sets it on every invocation as a
//     decimal string (the time left after its timeout countdown); earlier Java only
//     when a timeout is configured, also as a string;
//   - dubbo-go v3: a decimal string, always (DubboInvoker.getTimeout);
//   - dubbo-js (dubbo2.js): a hessian int, when a timeout is configured, in a typed
//     java.util.HashMap.
//
// The attachments map is the last value of the body, after the arguments, so the
// arguments are skipped structurally (never searched for the bytes of the key: an
// argument may contain them). ok is false for anything else: another serialization
// than hessian2, a body that cannot be walked, no such attachment, or a value that is
// not a positive whole number of milliseconds at most MaxBelievedTimeout.
//
// Cost: one walk over the body (strings are scanned, binaries skipped by length); it
// never allocates and never panics. The proxy calls it only for a request that has to
// wait, not on the forwarding fast path.
func RequestTimeout(frame []byte) (time.Duration, bool) {
	if len(frame) <= HeaderLen || frame[0] != Magic0 || frame[1] != Magic1 {
		return 0, false
	}
	if flags := frame[2]; flags&(FlagRequest|FlagEvent) != FlagRequest || flags&SerialMask != SerialHessian2 {
		return 0, false
	}
	att, ok := lastValue(frame[HeaderLen:])
	if !ok {
		return 0, false
	}
	var sk skipper
	v, ok := sk.mapValue(att, timeoutKey)
	if !ok {
		return 0, false
	}
	ms, ok := wholeMillis(v)
	if !ok || ms <= 0 || time.Duration(ms) > MaxBelievedTimeout/time.Millisecond {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// timeoutKey is the hessian2 string "timeout".
var timeoutKey = []byte("\x07timeout")

// lastValue walks a request body value by value (dubbo version, service path, service
// version, method, parameter descriptor, the arguments - dubbox clients add an int -
// and the attachments) and returns the last one, which must end the body exactly.
func lastValue(body []byte) ([]byte, bool) {
	var sk skipper
	pos, last := 0, -1
	for pos < len(body) {
		n, err := sk.value(body[pos:], 0)
		if err != nil {
			return nil, false
		}
		last = pos
		pos += n
	}
	if last < 0 {
		return nil, false
	}
	return body[last:], true
}

// mapValue returns the encoded value of the entry whose encoded key is key, in the
// map (untyped 'H' or typed 'M') at the start of b.
func (sk *skipper) mapValue(b, key []byte) ([]byte, bool) {
	if len(b) == 0 {
		return nil, false
	}
	pos := 1
	switch b[0] {
	case 'H':
	case 'M':
		n, err := sk.typ(b[1:])
		if err != nil {
			return nil, false
		}
		pos += n
	default:
		return nil, false
	}
	for pos < len(b) && b[pos] != 'Z' {
		k, err := sk.value(b[pos:], 1)
		if err != nil {
			return nil, false
		}
		isKey := bytes.Equal(b[pos:pos+k], key)
		pos += k
		v, err := sk.value(b[pos:], 1)
		if err != nil {
			return nil, false
		}
		if isKey {
			return b[pos : pos+v], true
		}
		pos += v
	}
	return nil, false
}

// wholeMillis reads an encoded value as a whole number: a hessian2 int or long in
// any of their forms, or a short string of decimal digits.
func wholeMillis(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var sk skipper
	if n, x, err := sk.int(v); err == nil && n == len(v) {
		return int64(x), true
	}
	if x, ok := hessianLong(v); ok {
		return x, true
	}
	if v[0] > 0x1f || int(v[0]) != len(v)-1 || len(v) > 11 { // a short string, at most 10 digits
		return 0, false
	}
	var x int64
	for _, c := range v[1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		x = x*10 + int64(c-'0')
	}
	return x, len(v) > 1
}

// hessianLong reads a whole encoded hessian2 long (compact forms, 'Y' long-as-int
// and 'L').
func hessianLong(v []byte) (int64, bool) {
	t := v[0]
	switch {
	case t >= 0xd8 && t <= 0xef && len(v) == 1:
		return int64(t) - 0xe0, true
	case t >= 0xf0 && len(v) == 2:
		return (int64(t)-0xf8)<<8 | int64(v[1]), true
	case t >= 0x38 && t <= 0x3f && len(v) == 3:
		return (int64(t)-0x3c)<<16 | int64(v[1])<<8 | int64(v[2]), true
	case t == 'Y' && len(v) == 5:
		return int64(int32(uint32(v[1])<<24 | uint32(v[2])<<16 | uint32(v[3])<<8 | uint32(v[4]))), true
	case t == 'L' && len(v) == 9:
		var x uint64
		for _, c := range v[1:] {
			x = x<<8 | uint64(c)
		}
		return int64(x), true
	}
	return 0, false
}
