package h2

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// The few headers Stormgate reads; every other header passes through unchanged.
const (
	HeaderPath        = ":path"
	HeaderStatus      = ":status"
	HeaderContentType = "content-type"
	HeaderGRPCStatus  = "grpc-status"
	HeaderGRPCMessage = "grpc-message"
)

// gRPC status codes Stormgate answers with on its own, or names when it classifies an answer.
const (
	GRPCOK                = 0
	GRPCCancelled         = 1
	GRPCUnknown           = 2
	GRPCDeadlineExceeded  = 4 // the call's own grpc-timeout would pass before the provider could answer
	GRPCPermissionDenied  = 7
	GRPCResourceExhausted = 8
	GRPCUnimplemented     = 12
	GRPCInternal          = 13
	GRPCUnavailable       = 14 // the provider connection was lost or is not there: clients may fail over
	GRPCUnauthenticated   = 16
)

// NumGRPCCodes is the number of canonical gRPC status codes, 0 (OK) to 16 (UNAUTHENTICATED).
const NumGRPCCodes = 17

// TripleBizError is the grpc-status with which dubbo-go's Triple provider answers a call whose method
// returned an error (triple_protocol's CodeBizError, v3.3.0): Triple's form of Dubbo 2's business
// exception, which travels with status OK. No gRPC server sends it (not a canonical code).
const TripleBizError = 17

var grpcCodeNames = [NumGRPCCodes]string{"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
	"NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
	"OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}

// GRPCCodeName is a canonical code's name (google.rpc.Code, "CANCELLED" with two Ls); "" for any other
// number.
func GRPCCodeName(code int) string {
	if code < 0 || code >= NumGRPCCodes {
		return ""
	}
	return grpcCodeNames[code]
}

// statusNames are the names StatusIndex indexes: the canonical codes', then OTHER for any other number.
var statusNames = append(grpcCodeNames[:len(grpcCodeNames):len(grpcCodeNames)], "OTHER")

// StatusNames are HTTP/2's values for the proxy's status label (gRPC's words): a new slice each call,
// in the order of StatusIndex.
func StatusNames() []string { return append([]string(nil), statusNames...) }

// StatusIndex is a gRPC status code's index in StatusNames: the code itself when it is canonical,
// OTHER's for any other number.
func StatusIndex(code int) int {
	if code < 0 || code >= NumGRPCCodes {
		return NumGRPCCodes
	}
	return code
}

// GRPCCode reads grpc-status from trailers (or a trailers-only response) without allocating: found is
// false when there is none; a value that is not a decimal number up to 9 digits gives code -1.
func GRPCCode(fields []HeaderField) (code int, found bool) {
	v, found := Field(fields, HeaderGRPCStatus)
	if !found {
		return 0, false
	}
	return smallNumber(v), true
}

// HTTPStatus reads a response head's :status (-1 when it is not a number; CheckResponseHeaders already
// requires three digits). found is false without one (trailers).
func HTTPStatus(fields []HeaderField) (status int, found bool) {
	v, found := Field(fields, HeaderStatus)
	if !found {
		return 0, false
	}
	return smallNumber(v), true
}

// HeaderGRPCTimeout is how long the client waits for the call (gRPC's PROTOCOL-HTTP2.md): Triple clients
// (dubbo-go, Java) send it too.
const HeaderGRPCTimeout = "grpc-timeout"

// GRPCTimeout reads grpc-timeout: 1 to 8 ASCII digits and a unit (H, M, S, m, u, n). ok is false without
// one or for any other form. It does not allocate.
func GRPCTimeout(fields []HeaderField) (d time.Duration, ok bool) {
	v, found := Field(fields, HeaderGRPCTimeout)
	if !found || len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n := smallNumber(v[:len(v)-1])
	if n < 0 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	if time.Duration(n) > math.MaxInt64/unit {
		return math.MaxInt64, true // hours beyond 292 years
	}
	return time.Duration(n) * unit, true
}

// smallNumber parses 1 to 9 decimal digits; -1 for anything else.
func smallNumber(s string) int {
	if len(s) == 0 || len(s) > 9 {
		return -1
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// GRPCFromHTTPStatus is the gRPC status a client gives an answer with HTTP status s and no grpc-status
// (gRPC's doc/http-grpc-status-mapping.md): a Triple provider answers an unknown path with 404, which a
// gRPC client reports as UNIMPLEMENTED.
func GRPCFromHTTPStatus(s int) int {
	switch s {
	case 400:
		return GRPCInternal
	case 401:
		return GRPCUnauthenticated
	case 403:
		return GRPCPermissionDenied
	case 404:
		return GRPCUnimplemented
	case 429, 502, 503, 504:
		return GRPCUnavailable
	}
	return GRPCUnknown
}

// GRPCFromReset is the gRPC status a client gives a stream the server reset with code (grpc-go's
// http2ErrConvTab, which follows gRPC's PROTOCOL-HTTP2.md): REFUSED_STREAM is UNAVAILABLE (not processed,
// retry elsewhere), CANCEL is CANCELLED, ENHANCE_YOUR_CALM and FLOW_CONTROL_ERROR RESOURCE_EXHAUSTED,
// INADEQUATE_SECURITY PERMISSION_DENIED, RFC 9113's other codes INTERNAL, an unknown code UNKNOWN.
func GRPCFromReset(code ErrCode) int {
	switch code {
	case ErrCodeRefusedStream:
		return GRPCUnavailable
	case ErrCodeCancel:
		return GRPCCancelled
	case ErrCodeFlowControl, ErrCodeEnhanceYourCalm:
		return GRPCResourceExhausted
	case ErrCodeInadequateSecurity:
		return GRPCPermissionDenied
	}
	if code <= ErrCodeHTTP11Required {
		return GRPCInternal
	}
	return GRPCUnknown
}

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
