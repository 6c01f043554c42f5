package dubbo

import "bytes"

// requestAttachment returns the text of the string attachment key (given hessian2
// encoded, e.g. "\x05group") of a hessian2 request body, searching only its last
// attachTail bytes, and none before from (where the arguments start, when known). The attachments map is the last value of a request body, and every
// encoder ends it with 'Z' as the body's last byte (Java's Hessian2Output, dubbo-go,
// hessian.js). A candidate occurrence of key counts only when, read as a key of that
// map, it starts a run of whole key/value pairs that ends with the map's 'Z' exactly at
// the body's end: bytes that merely contain the key inside an argument (a string, a
// map argument whose own 'Z' comes before the attachments) do not end there, and an
// occurrence as a value shifts the pairs so that the 'Z' falls where a value must be.
// The value must be a name (see nameAt); anything else reports false.
//
// It never allocates and never panics; the walk is bounded by the window.
//
// The lead's `timeout` walker reads the same map; the two are to be merged into one
// walk (issue 22/25). Keep this function's contract: key in, the string value out.
func requestAttachment(body []byte, from int, key []byte) ([]byte, bool) {
	if len(body) < 2 || body[len(body)-1] != hessianEnd {
		return nil, false
	}
	win := body[min(max(from, len(body)-attachTail), len(body)):]
	base := len(body) - len(win)
	for off := 0; off < len(win); {
		i := bytes.Index(win[off:], key)
		if i < 0 {
			return nil, false
		}
		at := base + off + i
		off += i + 1
		if val, ok := attachmentAt(body, at, len(key)); ok {
			return val, true
		}
	}
	return nil, false
}

// attachmentAt checks that body[at:] holds key (keyLen bytes) and a name value, then
// whole key/value pairs up to the 'Z' that is the body's last byte, and returns the value.
func attachmentAt(body []byte, at, keyLen int) ([]byte, bool) {
	val, pos, ok := nameAt(body, at+keyLen, false)
	if !ok {
		return nil, false
	}
	var sk skipper
	last := len(body) - 1
	for pos < last {
		k, err := skipValue(&sk, body[pos:last])
		if err != nil {
			return nil, false
		}
		pos += k
		if pos >= last {
			return nil, false // a key without its value
		}
		v, err := skipValue(&sk, body[pos:last])
		if err != nil {
			return nil, false
		}
		pos += v
	}
	return val, pos == last
}

// skipValue is sk.value with a fast path for the common attachment: a short ASCII
// string, whose length in bytes is its length in UTF-16 units.
func skipValue(sk *skipper, b []byte) (int, error) {
	start, units := 0, 0
	switch {
	case len(b) > 0 && b[0] <= hessianDirectMax:
		start, units = 1, int(b[0])
	case len(b) > 1 && b[0] >= hessianShort && b[0] <= hessianShort+3:
		start, units = 2, int(b[0]-hessianShort)<<8|int(b[1])
	}
	if end := start + units; start > 0 && end <= len(b) && isASCII(b[start:end]) {
		return end, nil
	}
	return sk.value(b, 1)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
