package proxy

import (
	"errors"
	"time"

	"github.com/stormgate/stormgate/proxy/dubbo"
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

// codecError puts a codec's own error under one of the sentinels above with the codec's message
// alone, on one line (errors.Join printed "frame too large\ndubbo: frame exceeds limit").
type codecError struct{ kind, err error }

func (e codecError) Error() string   { return e.err.Error() }
func (e codecError) Unwrap() []error { return []error{e.kind, e.err} }

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

// Codec is the seam between the proxy and a wire protocol. Implementations are
// stateless and safe for concurrent use; Append* methods append to dst and must
// not allocate when dst has room.
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
	CallReader // per-method metrics and the access log (methods.go)
}

// Dubbo is the Dubbo 2 codec.
type Dubbo struct{}

var _ Codec = Dubbo{}

// HeaderLen implements Codec.
func (Dubbo) HeaderLen() int { return dubbo.HeaderLen }

// ParseHeader implements Codec.
func (Dubbo) ParseHeader(hdr []byte, maxFrame int) (Frame, error) {
	if len(hdr) < dubbo.HeaderLen {
		if _, _, err := dubbo.Split(hdr, maxFrame); err != nil {
			return Frame{}, foreign(hdr)
		}
		return Frame{}, ErrShortHeader
	}
	h, err := dubbo.ParseHeader(hdr, maxFrame)
	if err != nil {
		switch {
		case errors.Is(err, dubbo.ErrBadMagic):
			return Frame{}, foreign(hdr)
		case errors.Is(err, dubbo.ErrTooLarge):
			err = codecError{ErrFrameTooLarge, err}
		default:
			err = codecError{ErrBadLength, err}
		}
		// ParseHeader decoded the whole header for these errors: keep what the proxy needs
		// to answer the frame (id, serial) and, for an oversize one, to skip it (kind, length).
		f := Frame{Kind: kindOf(h.Kind()), ID: h.ID, Serial: h.Serial(), Status: h.Status}
		if h.BodyLen >= 0 {
			f.Len = h.FrameLen()
		}
		return f, err
	}
	return Frame{Kind: kindOf(h.Kind()), ID: h.ID, Len: h.FrameLen(), Serial: h.Serial(), Status: h.Status}, nil
}

// foreign describes bytes that cannot start a Dubbo frame (issue 24: an HTTP/2 client was closed
// with "bad magic\ndubbo: bad magic", a telnet "ls" waited 30 s for a header).
func foreign(b []byte) error {
	return &ForeignError{Msg: dubbo.DescribeForeign(b), Reply: dubbo.ForeignReply(b)}
}

func kindOf(k dubbo.Kind) FrameKind {
	switch k {
	case dubbo.KindRequest:
		return FrameRequest
	case dubbo.KindOneWay:
		return FrameOneWay
	case dubbo.KindEventTwoWay:
		return FrameEventTwoWay
	case dubbo.KindEventOneWay:
		return FrameEventOneWay
	case dubbo.KindResponse:
		return FrameResponse
	case dubbo.KindEventResponse:
		return FrameEventResponse
	}
	return FrameInvalid
}

// SetID implements Codec.
func (Dubbo) SetID(frame []byte, id int64) { dubbo.SetID(frame, id) }

// AppendHeartbeatReply implements Codec: the Java form (status 20, body "N").
func (Dubbo) AppendHeartbeatReply(dst []byte, req Frame) []byte {
	return dubbo.AppendHeartbeatReply(dst, req.ID, req.Serial)
}

// AppendHeartbeatRequest implements Codec.
func (Dubbo) AppendHeartbeatRequest(dst []byte, id int64) []byte {
	return dubbo.AppendHeartbeatRequest(dst, id)
}

// AppendErrorReply implements Codec. Status choice (see docs/design.md):
//   - upstream lost / no upstream: 35 CHANNEL_INACTIVE, what Java's own
//     DefaultFuture.closeChannel reports when its connection dies. Java consumers turn any
//     non-OK, non-timeout status into a RemotingException -> RpcException(NETWORK_EXCEPTION),
//     which FailoverClusterInvoker retries on another provider (it is not a biz exception);
//     dubbo-go surfaces it as an error that its failover cluster retries.
//   - overloaded: 100 SERVER_THREADPOOL_EXHAUSTED, Dubbo's own "provider busy" answer.
//   - bad request: 40 BAD_REQUEST.
//   - timeout (max request age), deadline (the consumer's own timeout would pass
//     before the request could leave Stormgate; it never reaches the provider): 31
//     SERVER_TIMEOUT, which Java turns into a TimeoutException (retried by failover
//     like its own timeout, only sooner) and dubbo-go into an error.
//   - bad response: 50 BAD_RESPONSE, what a Java provider itself sends when its answer
//     exceeds the payload limit (ExchangeCodec.encodeResponse): the method ran, its
//     answer is lost.
//   - not routable (a provider's callback request): 70 SERVICE_ERROR, what a Java
//     consumer answers for a callback service it does not export.
func (Dubbo) AppendErrorReply(dst []byte, req Frame, why Failure, msg string) []byte {
	status := dubboFailureStatus(why)
	serial := req.Serial
	if serial == 0 {
		serial = dubbo.SerialHessian2
	}
	return dubbo.AppendErrorResponse(dst, req.ID, serial, status, msg)
}

// dubboFailureStatus is the status of Stormgate's own reply for why (AppendErrorReply).
func dubboFailureStatus(why Failure) byte {
	switch why {
	case FailUpstreamLost, FailNoUpstream:
		return dubbo.StatusChannelInactive
	case FailOverloaded:
		return dubbo.StatusThreadpoolExhausted
	case FailBadRequest:
		return dubbo.StatusBadRequest
	case FailTimeout, FailDeadline:
		return dubbo.StatusServerTimeout
	case FailBadResponse:
		return dubbo.StatusBadResponse
	case FailNotRoutable:
		return dubbo.StatusServiceError
	}
	return dubbo.StatusServerError
}

// AppendEvent implements Codec.
func (Dubbo) AppendEvent(dst []byte, id int64, ev Event) []byte {
	if ev == EventWriteable {
		return dubbo.AppendWriteableEvent(dst, id)
	}
	return dubbo.AppendReadonlyEvent(dst, id)
}

// EventOf implements Codec.
func (Dubbo) EventOf(frame []byte, f Frame) Event {
	if len(frame) < dubbo.HeaderLen {
		return EventOther
	}
	switch dubbo.EventBody(frame[dubbo.HeaderLen:]) {
	case 'R':
		return EventReadonly
	case 'W':
		return EventWriteable
	}
	return EventOther
}

// NotExecuted implements Codec.
func (Dubbo) NotExecuted(frame []byte) string { return dubbo.NotExecuted(frame).String() }

// NotExecutedReasons implements Codec.
func (Dubbo) NotExecutedReasons() []string {
	rs := dubbo.NotRunReasons()
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.String()
	}
	return names
}

// Closing implements Codec.
func (Dubbo) Closing(frame []byte) bool { return dubbo.ClosingAttachment(frame) }

// RequestTimeout implements Codec: the `timeout` attachment.
func (Dubbo) RequestTimeout(frame []byte) (time.Duration, bool) { return dubbo.RequestTimeout(frame) }
