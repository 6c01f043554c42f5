package h2

import (
	"strconv"
	"strings"
)

// The few headers Stormgate reads; every other header passes through unchanged.
const (
	HeaderPath        = ":path"
	HeaderStatus      = ":status"
	HeaderContentType = "content-type"
	HeaderGRPCStatus  = "grpc-status"
	HeaderGRPCMessage = "grpc-message"
)

// gRPC status codes Stormgate answers with on its own.
const (
	GRPCUnavailable       = 14 // the provider connection was lost or is not there: clients may fail over
	GRPCResourceExhausted = 8
	GRPCInternal          = 13
)

// Field returns the value of the first field called name.
func Field(fields []HeaderField, name string) (string, bool) {
	for _, f := range fields {
		if f.Name == name {
			return f.Value, true
		}
	}
	return "", false
}

// ServiceMethod splits a gRPC or Triple :path, "/<service>/<method>", as both protocols spell a call.
// ok is false for any other shape (no leading slash, empty parts, more segments).
func ServiceMethod(path string) (service, method string, ok bool) {
	if len(path) < 4 || path[0] != '/' {
		return "", "", false
	}
	service, method, ok = strings.Cut(path[1:], "/")
	if !ok || service == "" || method == "" || strings.IndexByte(method, '/') >= 0 {
		return "", "", false
	}
	return service, method, true
}

// GRPCStatus reads grpc-status and grpc-message from trailers (or a trailers-only response). The message is
// percent-decoded as the gRPC spec encodes it; a malformed escape is kept as it is. ok is false without a
// numeric grpc-status.
func GRPCStatus(fields []HeaderField) (code int, msg string, ok bool) {
	s, found := Field(fields, HeaderGRPCStatus)
	if !found {
		return 0, "", false
	}
	code, err := strconv.Atoi(s)
	if err != nil || code < 0 {
		return 0, "", false
	}
	m, _ := Field(fields, HeaderGRPCMessage)
	return code, percentDecode(m), true
}

// ErrorTrailers returns the header section of Stormgate's own gRPC error for a stream: trailers-only
// (:status 200, content-type application/grpc, grpc-status, grpc-message) when no response head was sent
// yet, else trailers (grpc-status, grpc-message). It is sent with END_STREAM, so the consumer sees a gRPC
// status, never a bare reset it cannot classify.
func ErrorTrailers(headSent bool, code int, msg string) []HeaderField {
	out := make([]HeaderField, 0, 4)
	if !headSent {
		out = append(out,
			HeaderField{Name: HeaderStatus, Value: "200"},
			HeaderField{Name: HeaderContentType, Value: "application/grpc"})
	}
	return append(out,
		HeaderField{Name: HeaderGRPCStatus, Value: strconv.Itoa(code)},
		HeaderField{Name: HeaderGRPCMessage, Value: percentEncode(msg)})
}

// percentEncode escapes what the gRPC spec says grpc-message must not carry raw: bytes outside 0x20-0x7e,
// and '%'.
func percentEncode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '%' {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}
