package wire

import (
	"errors"
	"time"
)

// Errors a Codec's ParseHeader wraps, so the proxy can count and answer them
// without knowing the protocol.
var (
	ErrBadMagic      = errors.New("bad magic")
	ErrFrameTooLarge = errors.New("frame too large")
	ErrBadLength     = errors.New("bad length")
	// ErrShortHeader: a header shorter than HeaderLen whose bytes may still start a frame.
	ErrShortHeader = errors.New("short header")
)

// ForeignError is ParseHeader's error for bytes that are not the codec's protocol (errors.Is
// matches ErrBadMagic): one line for the log saying what the bytes look like (an HTTP/2 preface, a
// telnet command), and what to write to the peer before closing it when these were the first bytes
// it sent (nil: nothing it could read).
type ForeignError struct {
	Msg   string
	Reply []byte
}

func (e *ForeignError) Error() string        { return e.Msg }
func (e *ForeignError) Is(target error) bool { return target == ErrBadMagic }

// Classify puts a codec's own error err under kind, one of the sentinels above, with err's
// message alone, on one line (errors.Join printed "frame too large\ndubbo: frame exceeds limit").
func Classify(kind, err error) error { return classified{kind, err} }

type classified struct{ kind, err error }

func (e classified) Error() string   { return e.err.Error() }
func (e classified) Unwrap() []error { return []error{e.kind, e.err} }

// FrameKind is what the proxy needs to know about a frame to route it.
type FrameKind uint8

// Frame kinds, protocol independent.
const (
	FrameInvalid       FrameKind = iota
	FrameRequest                 // two-way request: forward, expect one response
	FrameOneWay                  // one-way request: forward, no response
	FrameEventTwoWay             // event expecting a reply (heartbeat): answer locally
	FrameEventOneWay             // event without reply (READONLY / WRITEABLE)
	FrameResponse                // response to a request
	FrameEventResponse           // response to an event (heartbeat reply)
)

// Frame is a decoded frame header.
type Frame struct {
	Kind   FrameKind
	ID     int64
	Len    int  // whole frame length, header included
	Serial byte // serialization id, echoed in local replies
	Status byte // responses only
}

// Failure names why Stormgate answers a request itself; the codec maps it to a
// protocol status that makes consumers fail over where that is right.
type Failure uint8

// Failures.
const (
	FailUpstreamLost Failure = iota // provider connection died with the request in flight
	FailNoUpstream                  // no usable provider connection within the hold timeout
	FailOverloaded                  // a Stormgate limit (hold queue, in-flight cap) refused it
	FailBadRequest                  // malformed input
	FailTimeout                     // max request age reached
	FailBadResponse                 // the provider's answer cannot be delivered (oversize, an event frame)
	FailNotRoutable                 // a provider-to-consumer request (callback): nobody to hand it to
	FailDeadline                    // its consumer's own timeout would pass before it could be sent
)

// Event is the meaning of a one-way event request.
type Event uint8

// Events.
const (
	EventOther     Event = iota
	EventReadonly        // provider is shutting down: send nothing new on this connection
	EventWriteable       // provider accepts requests again
)

// Codec is a framed request/response protocol as the proxy sees it (Dubbo 2:
// proxy/dubbo.Codec). Implementations are stateless and safe for concurrent use;
// Append* methods append to dst and must not allocate when dst has room.
type Codec interface {
	HeaderLen() int
	// ParseHeader decodes a header. On error it wraps ErrBadMagic, ErrFrameTooLarge or
	// ErrBadLength; except for ErrBadMagic the returned Frame still carries Kind, ID and
	// Serial so the proxy can answer the frame, and with ErrFrameTooLarge also Len, the
	// declared length, so the proxy can skip the frame and keep the stream. Given fewer
	// than HeaderLen bytes (a header still arriving) it returns ErrShortHeader, or an error
	// wrapping ErrBadMagic as soon as those bytes cannot start a frame.
	ParseHeader(hdr []byte, maxFrame int) (Frame, error)
	SetID(frame []byte, id int64)
	AppendHeartbeatReply(dst []byte, req Frame) []byte
	AppendHeartbeatRequest(dst []byte, id int64) []byte
	AppendErrorReply(dst []byte, req Frame, why Failure, msg string) []byte
	AppendEvent(dst []byte, id int64, ev Event) []byte
	EventOf(frame []byte, f Frame) Event
	// NotExecuted names the provider's proof, in a response frame, that the request
	// never ran (it was refused before any business code: no exporter yet, a full
	// thread pool); "" when the frame proves nothing of the kind. Names label a
	// metric and are among NotExecutedReasons. It reads only the first bytes.
	NotExecuted(frame []byte) string
	NotExecutedReasons() []string
	// Closing reports whether a response says that the provider has begun a graceful
	// shutdown (dubbo-go's closing=true attachment).
	Closing(frame []byte) bool
	// RequestTimeout returns the timeout a whole request frame says its consumer
	// waits for the answer; false when it says none (or nothing believable). It may
	// walk the whole frame: the proxy asks only for requests that have to wait.
	RequestTimeout(frame []byte) (time.Duration, bool)
	CallReader // per-method metrics and the access log
}
