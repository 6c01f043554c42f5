package dubbo

import "errors"

// HeaderLen is the size of a Dubbo 2 frame header.
const HeaderLen = 16

// Magic bytes.
const (
	Magic0 = 0xda
	Magic1 = 0xbb
)

// Flag bits in header byte 2.
const (
	FlagRequest = 0x80
	FlagTwoWay  = 0x40
	FlagEvent   = 0x20
	SerialMask  = 0x1f
)

// Serialization ids.
const SerialHessian2 = 2

// Response status codes.
const (
	StatusOK                 = 20
	StatusClientTimeout      = 30
	StatusServerTimeout      = 31
	StatusChannelInactive    = 35
	StatusBadRequest         = 40
	StatusBadResponse        = 50
	StatusServiceNotFound    = 60
	StatusServiceError       = 70
	StatusServerError        = 80
	StatusClientError        = 90
	StatusThreadpoolExhausted = 100
)

// DefaultMaxFrame is the default cap on a whole frame (header + body): 8 MiB payload.
const DefaultMaxFrame = 8 << 20

// Kind classifies a frame by its header flags.
type Kind uint8

const (
	KindInvalid        Kind = iota
	KindRequest             // two-way, non-event request
	KindOneWay              // one-way, non-event request
	KindEventTwoWay         // event request expecting a reply (heartbeat)
	KindEventOneWay         // event request without reply (READONLY / WRITEABLE)
	KindResponse            // non-event response
	KindEventResponse       // event response (heartbeat reply)
)

// Errors returned by ParseHeader.
var (
	ErrShortHeader = errors.New("dubbo: header shorter than 16 bytes")
	ErrBadMagic    = errors.New("dubbo: bad magic")
	ErrNegativeLen = errors.New("dubbo: negative body length")
	ErrTooLarge    = errors.New("dubbo: frame exceeds limit")
)

// Header is the decoded 16-byte header.
type Header struct {
	Flags   byte
	Status  byte
	ID      int64
	BodyLen int32
}

// Kind returns the frame kind implied by the flags.
func (h Header) Kind() Kind { panic("TODO") }

// Serial returns the serialization id (low 5 bits of flags).
func (h Header) Serial() byte { return h.Flags & SerialMask }

// FrameLen is HeaderLen + BodyLen.
func (h Header) FrameLen() int { return HeaderLen + int(h.BodyLen) }

// ParseHeader decodes b[:16]. maxFrame caps HeaderLen+BodyLen (<=0 means DefaultMaxFrame).
// It never allocates and never panics for any input.
func ParseHeader(b []byte, maxFrame int) (Header, error) { panic("TODO") }

// SetID overwrites the request id in a frame's header (b[4:12]).
func SetID(b []byte, id int64) { panic("TODO") }

// AppendHeartbeatReply appends the Java-exact heartbeat response for a heartbeat request
// with the given id and serialization id: da bb (serial|0x20) 14 <id> 00 00 00 01 4e.
func AppendHeartbeatReply(dst []byte, id int64, serial byte) []byte { panic("TODO") }

// AppendHeartbeatRequest appends a heartbeat request: da bb e2 00 <id> 00 00 00 01 4e.
func AppendHeartbeatRequest(dst []byte, id int64) []byte { panic("TODO") }

// AppendErrorResponse appends a response with the given non-OK status whose body is the
// hessian2 string msg (the Dubbo error form). serial is the request's serialization id.
func AppendErrorResponse(dst []byte, id int64, serial byte, status byte, msg string) []byte {
	panic("TODO")
}

// AppendReadonlyEvent appends the READONLY event: da bb a2 00 <id> 00 00 00 02 01 52.
func AppendReadonlyEvent(dst []byte, id int64) []byte { panic("TODO") }

// AppendWriteableEvent appends the WRITEABLE event: da bb a2 00 <id> 00 00 00 02 01 57.
func AppendWriteableEvent(dst []byte, id int64) []byte { panic("TODO") }

// EventBody classifies an event request body: 'R' READONLY, 'W' WRITEABLE, 0 other (heartbeat/null).
func EventBody(body []byte) byte { panic("TODO") }
