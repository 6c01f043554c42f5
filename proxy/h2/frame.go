package h2

import (
	"encoding/binary"
	"strconv"
)

// FrameHeaderLen is the size of an HTTP/2 frame header.
const FrameHeaderLen = 9

// Frame size bounds (RFC 9113 §4.2, §6.5.2).
const (
	DefaultMaxFrameSize = 16384     // SETTINGS_MAX_FRAME_SIZE's initial value, and its lowest allowed value
	MaxFrameSizeLimit   = 1<<24 - 1 // the highest value SETTINGS_MAX_FRAME_SIZE may take
	MaxStreamID         = 1<<31 - 1
)

// FrameType is an HTTP/2 frame type.
type FrameType uint8

// Frame types (RFC 9113 §6).
const (
	FrameData         FrameType = 0x0
	FrameHeaders      FrameType = 0x1
	FramePriority     FrameType = 0x2
	FrameRSTStream    FrameType = 0x3
	FrameSettings     FrameType = 0x4
	FramePushPromise  FrameType = 0x5
	FramePing         FrameType = 0x6
	FrameGoAway       FrameType = 0x7
	FrameWindowUpdate FrameType = 0x8
	FrameContinuation FrameType = 0x9
)

var frameTypeNames = [...]string{
	"DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING", "GOAWAY",
	"WINDOW_UPDATE", "CONTINUATION",
}

// String returns the RFC name; an unknown type prints as "UNKNOWN_0x..".
func (t FrameType) String() string {
	if int(t) < len(frameTypeNames) {
		return frameTypeNames[t]
	}
	return "UNKNOWN_0x" + strconv.FormatUint(uint64(t), 16)
}

// Flags is a frame's flag byte. Which bits mean what depends on the type.
type Flags uint8

// Flag bits.
const (
	FlagEndStream  Flags = 0x1  // DATA, HEADERS
	FlagAck        Flags = 0x1  // SETTINGS, PING
	FlagEndHeaders Flags = 0x4  // HEADERS, PUSH_PROMISE, CONTINUATION
	FlagPadded     Flags = 0x8  // DATA, HEADERS, PUSH_PROMISE
	FlagPriority   Flags = 0x20 // HEADERS
)

// Has reports whether every bit of f2 is set in f.
func (f Flags) Has(f2 Flags) bool { return f&f2 == f2 }

// FrameHeader is a decoded frame header. StreamID has the reserved bit cleared.
type FrameHeader struct {
	Length   uint32 // payload length, 24 bits
	Type     FrameType
	Flags    Flags
	StreamID uint32
}

// FrameLen is FrameHeaderLen + Length.
func (h FrameHeader) FrameLen() int { return FrameHeaderLen + int(h.Length) }

// ParseFrameHeader decodes b[:9]. It returns ok = false when b is shorter. It never allocates; the
// reserved bit of the stream id is ignored, as §4.1 requires.
func ParseFrameHeader(b []byte) (h FrameHeader, ok bool) {
	if len(b) < FrameHeaderLen {
		return FrameHeader{}, false
	}
	return FrameHeader{
		Length:   uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]),
		Type:     FrameType(b[3]),
		Flags:    Flags(b[4]),
		StreamID: binary.BigEndian.Uint32(b[5:9]) & MaxStreamID,
	}, true
}

// AppendFrameHeader appends the 9-byte encoding of h. Length above 24 bits and the stream id's reserved bit
// are masked off; the caller keeps Length within the peer's SETTINGS_MAX_FRAME_SIZE.
func AppendFrameHeader(dst []byte, h FrameHeader) []byte {
	dst = append(dst, byte(h.Length>>16), byte(h.Length>>8), byte(h.Length), byte(h.Type), byte(h.Flags))
	return binary.BigEndian.AppendUint32(dst, h.StreamID&MaxStreamID)
}

// putFrameHeader writes h's encoding into b[:9].
func putFrameHeader(b []byte, h FrameHeader) {
	_ = AppendFrameHeader(b[:0:FrameHeaderLen], h)
}

// Split finds the first frame in a stream buffer. When buf holds a whole frame it returns its header and n,
// the frame's length (header plus payload: the frame is buf[:n]). When more bytes are needed it returns
// n = 0 and a nil error; the header is filled in once buf holds 9 bytes. A payload longer than maxFrameSize
// (the SETTINGS_MAX_FRAME_SIZE this side advertised; 0 means DefaultMaxFrameSize) is a FRAME_SIZE_ERROR
// connection error (§4.2: the size is checked before the payload arrives, so nothing is buffered for it).
// Split never allocates and never panics.
func Split(buf []byte, maxFrameSize uint32) (h FrameHeader, n int, err error) {
	h, ok := ParseFrameHeader(buf)
	if !ok {
		return h, 0, nil
	}
	if maxFrameSize == 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	if h.Length > maxFrameSize {
		return h, 0, errFrameTooLarge
	}
	if fl := h.FrameLen(); len(buf) >= fl {
		return h, fl, nil
	}
	return h, 0, nil
}

// Connection errors of the frame rules, preallocated so that returning them does not allocate.
var (
	errFrameTooLarge    = connErr(ErrCodeFrameSize, "frame longer than SETTINGS_MAX_FRAME_SIZE")
	errStreamZero       = connErr(ErrCodeProtocol, "frame type needs a stream id, got 0")
	errStreamNonZero    = connErr(ErrCodeProtocol, "frame type is for the connection, got a stream id")
	errPadding          = connErr(ErrCodeProtocol, "padding length not less than the payload")
	errHeadersShort     = connErr(ErrCodeFrameSize, "HEADERS too short for its padding and priority fields")
	errRSTLength        = connErr(ErrCodeFrameSize, "RST_STREAM length is not 4")
	errSettingsAckLen   = connErr(ErrCodeFrameSize, "SETTINGS ACK with a payload")
	errSettingsLength   = connErr(ErrCodeFrameSize, "SETTINGS length not a multiple of 6")
	errPushPromise      = connErr(ErrCodeProtocol, "PUSH_PROMISE, and push is disabled")
	errPingLength       = connErr(ErrCodeFrameSize, "PING length is not 8")
	errGoAwayLength     = connErr(ErrCodeFrameSize, "GOAWAY shorter than 8")
	errWindowLength     = connErr(ErrCodeFrameSize, "WINDOW_UPDATE length is not 4")
	errWindowZeroConn   = connErr(ErrCodeProtocol, "WINDOW_UPDATE of 0 on the connection")
	errUnexpectedFrame  = connErr(ErrCodeProtocol, "frame inside a header block")
	errContinuationLone = connErr(ErrCodeProtocol, "CONTINUATION without an open header block")
)

// CheckFrame applies RFC 9113 §6's rules for one frame type to a whole frame (header h and its payload,
// len(payload) == h.Length): which stream ids it may carry, fixed lengths, padding. It returns nil, a
// *ConnError or a *StreamError (only PRIORITY's bad length and a WINDOW_UPDATE of 0 on a stream are stream
// errors). Unknown frame types pass (§5.5: ignore them). It does not know the connection's state (which
// streams exist, whether a header block is open): Conn checks that. It never panics; it allocates only for
// a StreamError.
func CheckFrame(h FrameHeader, payload []byte) error {
	switch h.Type {
	case FrameData:
		if h.StreamID == 0 {
			return errStreamZero
		}
		_, err := stripPadding(h, payload)
		return err
	case FrameHeaders:
		if h.StreamID == 0 {
			return errStreamZero
		}
		_, err := HeaderBlockFragment(h, payload)
		return err
	case FramePriority:
		if h.StreamID == 0 {
			return errStreamZero
		}
		if len(payload) != 5 {
			return streamErr(h.StreamID, ErrCodeFrameSize, "PRIORITY length is not 5")
		}
	case FrameRSTStream:
		if h.StreamID == 0 {
			return errStreamZero
		}
		if len(payload) != 4 {
			return errRSTLength
		}
	case FrameSettings:
		if h.StreamID != 0 {
			return errStreamNonZero
		}
		if h.Flags.Has(FlagAck) && len(payload) != 0 {
			return errSettingsAckLen
		}
		if len(payload)%6 != 0 {
			return errSettingsLength
		}
		return checkSettings(payload)
	case FramePushPromise:
		// Stormgate advertises SETTINGS_ENABLE_PUSH = 0 to providers, and consumers may never push (§8.4).
		return errPushPromise
	case FramePing:
		if h.StreamID != 0 {
			return errStreamNonZero
		}
		if len(payload) != 8 {
			return errPingLength
		}
	case FrameGoAway:
		if h.StreamID != 0 {
			return errStreamNonZero
		}
		if len(payload) < 8 {
			return errGoAwayLength
		}
	case FrameWindowUpdate:
		if len(payload) != 4 {
			return errWindowLength
		}
		if binary.BigEndian.Uint32(payload)&MaxStreamID == 0 {
			if h.StreamID == 0 {
				return errWindowZeroConn
			}
			return streamErr(h.StreamID, ErrCodeProtocol, "WINDOW_UPDATE of 0")
		}
	case FrameContinuation:
		if h.StreamID == 0 {
			return errStreamZero
		}
	}
	return nil
}

// stripPadding removes the Pad Length byte and the padding of a DATA, HEADERS or PUSH_PROMISE payload when
// FlagPadded is set (§6.1): a pad length not less than what follows it is a PROTOCOL_ERROR.
func stripPadding(h FrameHeader, payload []byte) ([]byte, error) {
	if !h.Flags.Has(FlagPadded) {
		return payload, nil
	}
	if len(payload) == 0 {
		return nil, errPadding
	}
	pad := int(payload[0])
	rest := payload[1:]
	if pad >= len(payload) || pad > len(rest) {
		return nil, errPadding
	}
	return rest[:len(rest)-pad], nil
}

// DataPayload returns the application data of a DATA frame: its payload without padding. Flow control
// counts the whole payload (h.Length), padding included (§6.9.1).
func DataPayload(h FrameHeader, payload []byte) ([]byte, error) {
	return stripPadding(h, payload)
}

// HeaderBlockFragment returns the header block fragment of a HEADERS frame (padding and the priority
// fields removed) or a CONTINUATION frame (the whole payload). It never allocates.
func HeaderBlockFragment(h FrameHeader, payload []byte) ([]byte, error) {
	if h.Type != FrameHeaders {
		return payload, nil
	}
	var pad int
	if h.Flags.Has(FlagPadded) {
		if len(payload) < 1 {
			return nil, errHeadersShort
		}
		pad = int(payload[0])
		payload = payload[1:]
	}
	if h.Flags.Has(FlagPriority) {
		if len(payload) < 5 {
			return nil, errHeadersShort
		}
		payload = payload[5:]
	}
	if pad > len(payload) {
		return nil, errPadding
	}
	return payload[:len(payload)-pad], nil
}
