package h2

import "strconv"

// ErrCode is an HTTP/2 error code (RFC 9113 §7), carried by RST_STREAM and GOAWAY.
type ErrCode uint32

// Error codes.
const (
	ErrCodeNo                 ErrCode = 0x0
	ErrCodeProtocol           ErrCode = 0x1
	ErrCodeInternal           ErrCode = 0x2
	ErrCodeFlowControl        ErrCode = 0x3
	ErrCodeSettingsTimeout    ErrCode = 0x4
	ErrCodeStreamClosed       ErrCode = 0x5
	ErrCodeFrameSize          ErrCode = 0x6
	ErrCodeRefusedStream      ErrCode = 0x7
	ErrCodeCancel             ErrCode = 0x8
	ErrCodeCompression        ErrCode = 0x9
	ErrCodeConnect            ErrCode = 0xa
	ErrCodeEnhanceYourCalm    ErrCode = 0xb
	ErrCodeInadequateSecurity ErrCode = 0xc
	ErrCodeHTTP11Required     ErrCode = 0xd
)

var errCodeNames = [...]string{
	"NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
	"STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR",
	"ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
}

// NumErrCodeClasses is how many values ErrCode.Class takes: one per code RFC 9113 defines, and one for
// every other code.
const NumErrCodeClasses = len(errCodeNames) + 1

// Class is c's index among RFC 9113's codes (its value), or NumErrCodeClasses-1 for any other code: a
// peer chooses the code it sends, so metrics label by class, a bounded set.
func (c ErrCode) Class() int {
	if int(c) < len(errCodeNames) {
		return int(c)
	}
	return len(errCodeNames)
}

// ErrCodeClassName is the label of class i: the RFC name (ErrCode.String), or "OTHER".
func ErrCodeClassName(i int) string {
	if i < len(errCodeNames) {
		return errCodeNames[i]
	}
	return "OTHER"
}

// String returns the RFC name, e.g. "PROTOCOL_ERROR"; unknown codes print as "ERR_CODE_0x..". Metrics use
// it as a label value.
func (c ErrCode) String() string {
	if int(c) < len(errCodeNames) {
		return errCodeNames[c]
	}
	return "ERR_CODE_0x" + strconv.FormatUint(uint64(c), 16)
}

// ConnError is a connection error (RFC 9113 §5.4.1): the connection must end with a GOAWAY carrying Code.
// Reason is for logs; it never goes on the wire. The package's ConnErrors are preallocated values, so
// returning one does not allocate; compare with errors.As or by Code, not by pointer.
type ConnError struct {
	Code   ErrCode
	Reason string
}

func (e *ConnError) Error() string {
	return "h2: connection error " + e.Code.String() + ": " + e.Reason
}

// StreamError is a stream error (RFC 9113 §5.4.2): the stream must be reset with RST_STREAM(Code); the
// connection goes on.
type StreamError struct {
	Stream uint32
	Code   ErrCode
	Reason string
}

func (e *StreamError) Error() string {
	return "h2: stream " + strconv.FormatUint(uint64(e.Stream), 10) + " error " + e.Code.String() + ": " + e.Reason
}

func connErr(code ErrCode, reason string) *ConnError { return &ConnError{Code: code, Reason: reason} }

func streamErr(id uint32, code ErrCode, reason string) *StreamError {
	return &StreamError{Stream: id, Code: code, Reason: reason}
}
