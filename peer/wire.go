package peer

// Frame bodies the codec (proxy/dubbo) does not build or read: a business exception
// response, and reading one back. Everything else comes from proxy/dubbo.

import (
	"encoding/binary"
	"errors"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Response body types (hessian2 compact ints 0x90+n).
const (
	respWithException = 0x90
	respExceptionAtt  = 0x93
)

var errNotInt = errors.New("peer: hessian2 value is not an int")

// appendExceptionResponse appends what a Java provider sends for a business exception:
// status OK, body type WITH_EXCEPTION, then the Throwable as a hessian2 object with the
// serializable fields of java.lang.Throwable in declaration order (detailMessage, cause,
// stackTrace, suppressedExceptions). cause and suppressedExceptions are null, stackTrace
// an empty StackTraceElement array.
func appendExceptionResponse(dst []byte, id int64, serial byte, class, msg string) []byte {
	start := len(dst)
	dst = dubbo.AppendHeader(dst, dubbo.Header{Flags: serial & dubbo.SerialMask, Status: dubbo.StatusOK, ID: id})
	dst = append(dst, respWithException)
	dst = append(dst, 'C')
	dst = dubbo.AppendHessianString(dst, class)
	dst = append(dst, 0x90+4) // four fields
	for _, f := range [...]string{"detailMessage", "cause", "stackTrace", "suppressedExceptions"} {
		dst = dubbo.AppendHessianString(dst, f)
	}
	dst = append(dst, 0x60) // an instance of class definition 0
	dst = dubbo.AppendHessianString(dst, msg)
	dst = append(dst, 'N')
	dst = append(dst, 0x70) // fixed-length typed list of length 0
	dst = dubbo.AppendHessianString(dst, "[java.lang.StackTraceElement")
	dst = append(dst, 'N')
	binary.BigEndian.PutUint32(dst[start+12:start+16], uint32(len(dst)-start-dubbo.HeaderLen))
	return dst
}

// okBody decodes a status-OK response body into the value (a string value, or the
// exception's detailMessage) and the exception class (WITH_EXCEPTION bodies only).
// Null and non-string values give "".
func okBody(body []byte) (value, exception string) {
	if len(body) > 0 && (body[0] == respWithException || body[0] == respExceptionAtt) {
		return parseException(body[1:])
	}
	v, _ := dubbo.ParseValueResponse(body)
	return v, ""
}

// parseException reads a class definition followed by an instance of it, as Java's
// Hessian2Output writes a Throwable, and returns the message (when the first field is
// detailMessage) and the class name. Other shapes give what could be read.
func parseException(b []byte) (msg, class string) {
	if len(b) == 0 || b[0] != 'C' {
		return "", ""
	}
	class, n, err := dubbo.ReadHessianString(b[1:])
	if err != nil {
		return "", ""
	}
	b = b[1+n:]
	nf, n, err := readHessianInt(b)
	if err != nil || nf < 0 {
		return "", class
	}
	b = b[n:]
	var first string
	for i := 0; i < int(nf); i++ {
		f, n, err := dubbo.ReadHessianString(b)
		if err != nil {
			return "", class
		}
		if i == 0 {
			first = f
		}
		b = b[n:]
	}
	switch {
	case len(b) > 0 && b[0] >= 0x60 && b[0] <= 0x6f:
		b = b[1:]
	case len(b) > 0 && b[0] == 'O':
		_, n, err := readHessianInt(b[1:])
		if err != nil {
			return "", class
		}
		b = b[1+n:]
	default:
		return "", class
	}
	if first != "detailMessage" {
		return "", class
	}
	msg, _, _ = dubbo.ReadHessianString(b)
	return msg, class
}

// readHessianInt reads a hessian2 int in any of its encodings.
func readHessianInt(b []byte) (int32, int, error) {
	if len(b) == 0 {
		return 0, 0, dubbo.ErrTruncated
	}
	c := b[0]
	switch {
	case c >= 0x80 && c <= 0xbf:
		return int32(c) - 0x90, 1, nil
	case c >= 0xc0 && c <= 0xcf:
		if len(b) < 2 {
			return 0, 0, dubbo.ErrTruncated
		}
		return (int32(c)-0xc8)<<8 | int32(b[1]), 2, nil
	case c >= 0xd0 && c <= 0xd7:
		if len(b) < 3 {
			return 0, 0, dubbo.ErrTruncated
		}
		return (int32(c)-0xd4)<<16 | int32(b[1])<<8 | int32(b[2]), 3, nil
	case c == 'I':
		if len(b) < 5 {
			return 0, 0, dubbo.ErrTruncated
		}
		return int32(binary.BigEndian.Uint32(b[1:5])), 5, nil
	default:
		return 0, 0, errNotInt
	}
}
