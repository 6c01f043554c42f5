package h2

import (
	"bytes"
	"encoding/binary"
)

// ClientPreface is what an HTTP/2 client sends first (RFC 9113 §3.4), before its SETTINGS frame.
const ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

var (
	errBadPreface = connErr(ErrCodeProtocol, "bad client connection preface")
	// ErrHTTP1Upgrade is CheckPreface's answer to an HTTP/1.1 request, e.g. an "Upgrade: h2c" attempt,
	// which Triple and gRPC clients never make: they speak HTTP/2 with prior knowledge.
	ErrHTTP1Upgrade = connErr(ErrCodeProtocol, "HTTP/1.1 request (h2c upgrade is not supported; use prior knowledge)")
)

// CheckPreface checks the start of a client's byte stream. It returns n = len(ClientPreface) once the whole
// preface is there, n = 0 and a nil error while what is there is a prefix of it, and an error as soon as a
// byte differs (ErrHTTP1Upgrade when the bytes look like an HTTP/1.x request line). It never allocates.
func CheckPreface(buf []byte) (n int, err error) {
	m := min(len(buf), len(ClientPreface))
	if string(buf[:m]) != ClientPreface[:m] {
		if looksHTTP1(buf) {
			return 0, ErrHTTP1Upgrade
		}
		return 0, errBadPreface
	}
	if m < len(ClientPreface) {
		return 0, nil
	}
	return len(ClientPreface), nil
}

// looksHTTP1 reports whether buf starts like an HTTP/1.x request: an upper-case method and a space.
func looksHTTP1(buf []byte) bool {
	i := bytes.IndexByte(buf[:min(len(buf), 16)], ' ')
	if i <= 0 {
		return false
	}
	for _, c := range buf[:i] {
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

// AppendPing appends a PING frame with the given 8 bytes; ack sets the ACK flag (an answer).
func AppendPing(dst []byte, ack bool, data [8]byte) []byte {
	var f Flags
	if ack {
		f = FlagAck
	}
	dst = AppendFrameHeader(dst, FrameHeader{Length: 8, Type: FramePing, Flags: f})
	return append(dst, data[:]...)
}

// PingData returns a PING payload's 8 bytes (a checked payload has exactly 8).
func PingData(payload []byte) (d [8]byte) {
	copy(d[:], payload)
	return d
}

// AppendWindowUpdate appends a WINDOW_UPDATE for stream (0: the connection). incr must be 1..2^31-1.
func AppendWindowUpdate(dst []byte, stream, incr uint32) []byte {
	dst = AppendFrameHeader(dst, FrameHeader{Length: 4, Type: FrameWindowUpdate, StreamID: stream})
	return binary.BigEndian.AppendUint32(dst, incr&MaxStreamID)
}

// WindowIncrement returns a checked WINDOW_UPDATE payload's increment.
func WindowIncrement(payload []byte) uint32 {
	if len(payload) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(payload) & MaxStreamID
}

// AppendRSTStream appends a RST_STREAM for stream with code.
func AppendRSTStream(dst []byte, stream uint32, code ErrCode) []byte {
	dst = AppendFrameHeader(dst, FrameHeader{Length: 4, Type: FrameRSTStream, StreamID: stream})
	return binary.BigEndian.AppendUint32(dst, uint32(code))
}

// RSTCode returns a checked RST_STREAM payload's error code.
func RSTCode(payload []byte) ErrCode {
	if len(payload) < 4 {
		return ErrCodeProtocol
	}
	return ErrCode(binary.BigEndian.Uint32(payload))
}

// AppendGoAway appends a GOAWAY with the last stream id this side will process, code, and debug data
// (opaque bytes for logs; keep it short, the whole frame must fit the peer's SETTINGS_MAX_FRAME_SIZE).
func AppendGoAway(dst []byte, lastStream uint32, code ErrCode, debug string) []byte {
	dst = AppendFrameHeader(dst, FrameHeader{Length: uint32(8 + len(debug)), Type: FrameGoAway})
	dst = binary.BigEndian.AppendUint32(dst, lastStream&MaxStreamID)
	dst = binary.BigEndian.AppendUint32(dst, uint32(code))
	return append(dst, debug...)
}

// GoAway is a decoded GOAWAY payload. Debug aliases the payload.
type GoAway struct {
	LastStream uint32
	Code       ErrCode
	Debug      []byte
}

// ParseGoAway decodes a checked GOAWAY payload (at least 8 bytes; shorter gives the zero GoAway).
func ParseGoAway(payload []byte) GoAway {
	if len(payload) < 8 {
		return GoAway{}
	}
	return GoAway{
		LastStream: binary.BigEndian.Uint32(payload) & MaxStreamID,
		Code:       ErrCode(binary.BigEndian.Uint32(payload[4:])),
		Debug:      payload[8:],
	}
}
