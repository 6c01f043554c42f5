package dubbo

import (
	"encoding/binary"
	"errors"
)

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
	StatusOK                  = 20
	StatusSerializationError  = 25 // Dubbo 3.x only
	StatusClientTimeout       = 30
	StatusServerTimeout       = 31
	StatusChannelInactive     = 35
	StatusBadRequest          = 40
	StatusBadResponse         = 50
	StatusServiceNotFound     = 60
	StatusServiceError        = 70
	StatusServerError         = 80
	StatusClientError         = 90
	StatusThreadpoolExhausted = 100
)

// DefaultMaxFrame is the default cap on a whole frame (header + body): 8 MiB payload.
const DefaultMaxFrame = 8 << 20

// Kind classifies a frame by its header flags.
type Kind uint8

const (
	KindInvalid       Kind = iota // zero value; never returned by Header.Kind
	KindRequest                   // two-way, non-event request
	KindOneWay                    // one-way, non-event request
	KindEventTwoWay               // event request expecting a reply (heartbeat)
	KindEventOneWay               // event request without reply (READONLY / WRITEABLE)
	KindResponse                  // non-event response
	KindEventResponse             // event response (heartbeat reply)
)

// String returns the kind's name, for logs and test failures.
func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindOneWay:
		return "one-way"
	case KindEventTwoWay:
		return "event-two-way"
	case KindEventOneWay:
		return "event-one-way"
	case KindResponse:
		return "response"
	case KindEventResponse:
		return "event-response"
	}
	return "invalid"
}

// Errors returned by ParseHeader and Split.
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

// Kind returns the frame kind implied by the request, two-way and event flags.
// The two-way bit of a response is ignored, as Java Dubbo does. Every flag
// combination maps to a valid kind; KindInvalid is only the zero value.
func (h Header) Kind() Kind {
	if h.Flags&FlagRequest == 0 {
		if h.Flags&FlagEvent != 0 {
			return KindEventResponse
		}
		return KindResponse
	}
	twoWay := h.Flags&FlagTwoWay != 0
	if h.Flags&FlagEvent != 0 {
		if twoWay {
			return KindEventTwoWay
		}
		return KindEventOneWay
	}
	if twoWay {
		return KindRequest
	}
	return KindOneWay
}

// Serial returns the serialization id (low 5 bits of flags).
func (h Header) Serial() byte { return h.Flags & SerialMask }

// FrameLen is HeaderLen + BodyLen.
func (h Header) FrameLen() int { return HeaderLen + int(h.BodyLen) }

// effectiveMax maps maxFrame <= 0 to DefaultMaxFrame.
func effectiveMax(maxFrame int) int {
	if maxFrame <= 0 {
		return DefaultMaxFrame
	}
	return maxFrame
}

// ParseHeader decodes b[:16]. maxFrame caps HeaderLen+BodyLen (<=0 means DefaultMaxFrame).
// It never allocates and never panics for any input.
//
// On ErrShortHeader and ErrBadMagic the returned Header is zero. On ErrNegativeLen and
// ErrTooLarge it is fully decoded, so the caller can still name the id it refuses.
func ParseHeader(b []byte, maxFrame int) (Header, error) {
	if len(b) < HeaderLen {
		return Header{}, ErrShortHeader
	}
	if b[0] != Magic0 || b[1] != Magic1 {
		return Header{}, ErrBadMagic
	}
	h := Header{
		Flags:   b[2],
		Status:  b[3],
		ID:      int64(binary.BigEndian.Uint64(b[4:12])),
		BodyLen: int32(binary.BigEndian.Uint32(b[12:16])),
	}
	if h.BodyLen < 0 {
		return h, ErrNegativeLen
	}
	// int64 so that the sum cannot wrap on 32-bit platforms.
	if int64(HeaderLen)+int64(h.BodyLen) > int64(effectiveMax(maxFrame)) {
		return h, ErrTooLarge
	}
	return h, nil
}

// Split finds the first frame in a stream buffer read from a plain socket.
// When buf holds a whole frame it returns its header and n = its length (header
// plus body; the frame is buf[:n]). When more bytes are needed it returns n = 0 and
// a nil error; the header is filled in once buf holds 16 bytes, so h.FrameLen()
// tells how much to wait for. A wrong magic is reported as soon as the first
// bytes are seen, without waiting for a full header. On error n is 0 and the
// stream cannot be resynchronised: close the connection.
// Split never allocates and never panics.
func Split(buf []byte, maxFrame int) (h Header, n int, err error) {
	if len(buf) < HeaderLen {
		if (len(buf) > 0 && buf[0] != Magic0) || (len(buf) > 1 && buf[1] != Magic1) {
			return Header{}, 0, ErrBadMagic
		}
		return Header{}, 0, nil
	}
	h, err = ParseHeader(buf, maxFrame)
	if err != nil {
		return h, 0, err
	}
	if fl := h.FrameLen(); len(buf) >= fl {
		return h, fl, nil
	}
	return h, 0, nil
}

// SetID overwrites the request id in a frame's header (b[4:12]).
// b must hold at least 12 bytes (a parsed frame always does); it panics otherwise,
// like binary.BigEndian.PutUint64.
func SetID(b []byte, id int64) {
	binary.BigEndian.PutUint64(b[4:12], uint64(id))
}

// AppendHeader appends the 16-byte encoding of h.
func AppendHeader(dst []byte, h Header) []byte {
	dst = append(dst, Magic0, Magic1, h.Flags, h.Status)
	dst = binary.BigEndian.AppendUint64(dst, uint64(h.ID))
	return binary.BigEndian.AppendUint32(dst, uint32(h.BodyLen))
}

// hessianNull is the hessian2 encoding of null: the body of every heartbeat.
const hessianNull = 'N'

// AppendHeartbeatReply appends the Java-exact heartbeat response for a heartbeat request
// with the given id and serialization id: da bb (serial|0x20) 14 <id> 00 00 00 01 4e.
// The body is the hessian2 null; only the low 5 bits of serial are used.
func AppendHeartbeatReply(dst []byte, id int64, serial byte) []byte {
	dst = AppendHeader(dst, Header{Flags: serial&SerialMask | FlagEvent, Status: StatusOK, ID: id, BodyLen: 1})
	return append(dst, hessianNull)
}

// AppendHeartbeatRequest appends a heartbeat request: da bb e2 00 <id> 00 00 00 01 4e.
func AppendHeartbeatRequest(dst []byte, id int64) []byte {
	dst = AppendHeader(dst, Header{Flags: FlagRequest | FlagTwoWay | FlagEvent | SerialHessian2, ID: id, BodyLen: 1})
	return append(dst, hessianNull)
}

// AppendErrorResponse appends a response with the given non-OK status whose body is the
// hessian2 string msg (the Dubbo error form). serial is the request's serialization id
// (low 5 bits used). The caller keeps msg small enough for the peer's frame limit.
func AppendErrorResponse(dst []byte, id int64, serial byte, status byte, msg string) []byte {
	start := len(dst)
	dst = AppendHeader(dst, Header{Flags: serial & SerialMask, Status: status, ID: id})
	dst = AppendHessianString(dst, msg)
	putBodyLen(dst[start:])
	return dst
}

// putBodyLen writes len(frame)-HeaderLen into the header's length field.
func putBodyLen(frame []byte) {
	binary.BigEndian.PutUint32(frame[12:16], uint32(len(frame)-HeaderLen))
}

// AppendReadonlyEvent appends the READONLY event: da bb a2 00 <id> 00 00 00 02 01 52.
func AppendReadonlyEvent(dst []byte, id int64) []byte {
	return appendStateEvent(dst, id, 'R')
}

// AppendWriteableEvent appends the WRITEABLE event: da bb a2 00 <id> 00 00 00 02 01 57.
func AppendWriteableEvent(dst []byte, id int64) []byte {
	return appendStateEvent(dst, id, 'W')
}

// appendStateEvent appends a one-way event request whose body is the one-character
// hessian2 string c.
func appendStateEvent(dst []byte, id int64, c byte) []byte {
	dst = AppendHeader(dst, Header{Flags: FlagRequest | FlagEvent | SerialHessian2, ID: id, BodyLen: 2})
	return append(dst, 0x01, c)
}

// EventBody classifies an event request body: 'R' READONLY, 'W' WRITEABLE, 0 other (heartbeat/null).
// Bytes after the string (dubbo-go appends an extra 'N' to bodies) are ignored.
func EventBody(body []byte) byte {
	if len(body) >= 2 && body[0] == 0x01 && (body[1] == 'R' || body[1] == 'W') {
		return body[1]
	}
	return 0
}
