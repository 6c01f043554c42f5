package dubbo

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Request body constants, as Java DubboCodec.encodeRequestData and dubbo-go's
// hessian marshalRequest write them.
const (
	dubboProtocolVersion  = "2.0.2"
	defaultServiceVersion = "0.0.0"
	stringDescriptor      = "Ljava/lang/String;"
)

// Response body types (DubboCodec), hessian2 compact ints 0x90+n.
const (
	respWithException            = 0x90
	respValue                    = 0x91
	respNullValue                = 0x92
	respWithExceptionAttachments = 0x93
	respValueAttachments         = 0x94
	respNullValueAttachments     = 0x95
)

// hessian2 untyped map delimiters.
const (
	hessianMapUntyped = 'H'
	hessianEnd        = 'Z'
)

// Errors returned by the body helpers.
var (
	ErrArgNotString      = errors.New("dubbo: first argument is not a string")
	ErrResponseException = errors.New("dubbo: response carries an exception")
	ErrResponseType      = errors.New("dubbo: unknown response body type")
)

// AppendRequest appends a whole hessian2 Dubbo request frame (flags 0x80|serial 2, plus
// 0x40 when twoWay) calling service.method(arg) with one java.lang.String argument.
// The body is what a Java or dubbo-go consumer writes: dubbo version "2.0.2", service
// path, service version "0.0.0", method, descriptor "Ljava/lang/String;", the argument,
// then the attachments map H {"path": service, "interface": service, "version": "0.0.0"} Z.
// It is meant for test peers and allocates only when dst must grow.
func AppendRequest(dst []byte, id int64, twoWay bool, service, method string, arg string) []byte {
	return AppendRequestTimeout(dst, id, twoWay, service, method, arg, 0)
}

// AppendRequestTimeout is AppendRequest with the consumer's timeout as the last
// attachment, timeout -> its milliseconds as a decimal string, as dubbo-go and Java
// Dubbo 3 write it (see RequestTimeout); timeout <= 0 adds none.
func AppendRequestTimeout(dst []byte, id int64, twoWay bool, service, method, arg string, timeout time.Duration) []byte {
	flags := byte(FlagRequest | SerialHessian2)
	if twoWay {
		flags |= FlagTwoWay
	}
	start := len(dst)
	dst = AppendHeader(dst, Header{Flags: flags, ID: id})
	dst = AppendHessianString(dst, dubboProtocolVersion)
	dst = AppendHessianString(dst, service)
	dst = AppendHessianString(dst, defaultServiceVersion)
	dst = AppendHessianString(dst, method)
	dst = AppendHessianString(dst, stringDescriptor)
	dst = AppendHessianString(dst, arg)
	dst = append(dst, hessianMapUntyped)
	dst = AppendHessianString(dst, "path")
	dst = AppendHessianString(dst, service)
	dst = AppendHessianString(dst, "interface")
	dst = AppendHessianString(dst, service)
	dst = AppendHessianString(dst, "version")
	dst = AppendHessianString(dst, defaultServiceVersion)
	if ms := timeout.Milliseconds(); ms > 0 {
		dst = append(dst, timeoutKey...)
		n := len(dst) // a short hessian2 string: one length byte (at most 19 digits), then the digits
		dst = strconv.AppendInt(append(dst, 0), ms, 10)
		dst[n] = byte(len(dst) - n - 1)
	}
	dst = append(dst, hessianEnd)
	putBodyLen(dst[start:])
	return dst
}

// ParseRequest reads the service path, method name and first argument of a hessian2
// request body (the bytes after the header). It reads only as far as the first
// argument, so attachments, further arguments and trailing bytes are never looked at.
// A null dubbo version, service version or argument is accepted (read as "").
// With no arguments (empty descriptor) firstStringArg is "". When the first parameter
// is not java.lang.String, service and method are still returned with ErrArgNotString.
func ParseRequest(body []byte) (service, method, firstStringArg string, err error) {
	pos := 0
	skip := func(field string) error {
		n, err := skipHessianString(body[pos:])
		if err != nil {
			return fmt.Errorf("dubbo: request %s: %w", field, err)
		}
		pos += n
		return nil
	}
	read := func(field string) (string, error) {
		s, n, err := ReadHessianString(body[pos:])
		if err != nil {
			return "", fmt.Errorf("dubbo: request %s: %w", field, err)
		}
		pos += n
		return s, nil
	}
	if err = skip("dubbo version"); err != nil {
		return "", "", "", err
	}
	if service, err = read("service path"); err != nil {
		return "", "", "", err
	}
	if err = skip("service version"); err != nil {
		return "", "", "", err
	}
	if method, err = read("method"); err != nil {
		return "", "", "", err
	}
	desc, err := read("parameter descriptor")
	if err != nil {
		return "", "", "", err
	}
	if desc == "" {
		return service, method, "", nil
	}
	if !strings.HasPrefix(desc, stringDescriptor) {
		return service, method, "", ErrArgNotString
	}
	if firstStringArg, err = read("first argument"); err != nil {
		return "", "", "", err
	}
	return service, method, firstStringArg, nil
}

// AppendValueResponse appends an OK (status 20) response frame whose body is the
// RESPONSE_VALUE type (0x91) followed by the hessian2 string value. serial is the
// request's serialization id (low 5 bits used).
func AppendValueResponse(dst []byte, id int64, serial byte, value string) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Flags: serial & SerialMask, Status: StatusOK, ID: id})
	dst = append(dst, respValue)
	dst = AppendHessianString(dst, value)
	putBodyLen(dst[start:])
	return dst
}

// ParseValueResponse reads the string value of an OK response body. It accepts the
// value types with and without attachments (which, like dubbo-go's trailing 'N', are
// ignored); a null value type returns "". A body carrying an exception returns
// ErrResponseException; a non-string value returns ErrNotString.
func ParseValueResponse(body []byte) (string, error) {
	if len(body) == 0 {
		return "", ErrTruncated
	}
	switch body[0] {
	case respValue, respValueAttachments:
		s, _, err := ReadHessianString(body[1:])
		return s, err
	case respNullValue, respNullValueAttachments:
		return "", nil
	case respWithException, respWithExceptionAttachments:
		return "", ErrResponseException
	}
	return "", ErrResponseType
}
