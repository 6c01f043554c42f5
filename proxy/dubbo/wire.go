package dubbo

import (
	"errors"
	"time"

	"github.com/stormgate/stormgate/proxy/wire"
)

// Codec is Dubbo 2 as the proxy sees it: wire.Codec over this package's functions.
// It is what cmd/sidecar hands to proxy.New.
type Codec struct{}

var _ wire.Codec = Codec{}

// HeaderLen implements wire.Codec.
func (Codec) HeaderLen() int { return HeaderLen }

// ParseHeader implements wire.Codec.
func (Codec) ParseHeader(hdr []byte, maxFrame int) (wire.Frame, error) {
	if len(hdr) < HeaderLen {
		if _, _, err := Split(hdr, maxFrame); err != nil {
			return wire.Frame{}, foreign(hdr)
		}
		return wire.Frame{}, wire.ErrShortHeader
	}
	h, err := ParseHeader(hdr, maxFrame)
	if err != nil {
		switch {
		case errors.Is(err, ErrBadMagic):
			return wire.Frame{}, foreign(hdr)
		case errors.Is(err, ErrTooLarge):
			err = wire.Classify(wire.ErrFrameTooLarge, err)
		default:
			err = wire.Classify(wire.ErrBadLength, err)
		}
		// ParseHeader decoded the whole header for these errors: keep what the proxy needs
		// to answer the frame (id, serial) and, for an oversize one, to skip it (kind, length).
		f := wire.Frame{Kind: kindOf(h.Kind()), ID: h.ID, Serial: h.Serial(), Status: h.Status}
		if h.BodyLen >= 0 {
			f.Len = h.FrameLen()
		}
		return f, err
	}
	return wire.Frame{Kind: kindOf(h.Kind()), ID: h.ID, Len: h.FrameLen(), Serial: h.Serial(), Status: h.Status}, nil
}

// foreign describes bytes that cannot start a Dubbo frame (issue 24: an HTTP/2 client was closed
// with "bad magic\ndubbo: bad magic", a telnet "ls" waited 30 s for a header).
func foreign(b []byte) error {
	return &wire.ForeignError{Msg: DescribeForeign(b), Reply: ForeignReply(b)}
}

func kindOf(k Kind) wire.FrameKind {
	switch k {
	case KindRequest:
		return wire.FrameRequest
	case KindOneWay:
		return wire.FrameOneWay
	case KindEventTwoWay:
		return wire.FrameEventTwoWay
	case KindEventOneWay:
		return wire.FrameEventOneWay
	case KindResponse:
		return wire.FrameResponse
	case KindEventResponse:
		return wire.FrameEventResponse
	}
	return wire.FrameInvalid
}

// SetID implements wire.Codec.
func (Codec) SetID(frame []byte, id int64) { SetID(frame, id) }

// AppendHeartbeatReply implements wire.Codec: the Java form (status 20, body "N").
func (Codec) AppendHeartbeatReply(dst []byte, req wire.Frame) []byte {
	return AppendHeartbeatReply(dst, req.ID, req.Serial)
}

// AppendHeartbeatRequest implements wire.Codec.
func (Codec) AppendHeartbeatRequest(dst []byte, id int64) []byte {
	return AppendHeartbeatRequest(dst, id)
}

// AppendErrorReply implements wire.Codec. Status choice (see docs/design.md):
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
func (Codec) AppendErrorReply(dst []byte, req wire.Frame, why wire.Failure, msg string) []byte {
	serial := req.Serial
	if serial == 0 {
		serial = SerialHessian2
	}
	return AppendErrorResponse(dst, req.ID, serial, failureStatus(why), msg)
}

// failureStatus is the status of Stormgate's own reply for why (AppendErrorReply).
func failureStatus(why wire.Failure) byte {
	switch why {
	case wire.FailUpstreamLost, wire.FailNoUpstream:
		return StatusChannelInactive
	case wire.FailOverloaded:
		return StatusThreadpoolExhausted
	case wire.FailBadRequest:
		return StatusBadRequest
	case wire.FailTimeout, wire.FailDeadline:
		return StatusServerTimeout
	case wire.FailBadResponse:
		return StatusBadResponse
	case wire.FailNotRoutable:
		return StatusServiceError
	}
	return StatusServerError
}

// AppendEvent implements wire.Codec.
func (Codec) AppendEvent(dst []byte, id int64, ev wire.Event) []byte {
	if ev == wire.EventWriteable {
		return AppendWriteableEvent(dst, id)
	}
	return AppendReadonlyEvent(dst, id)
}

// EventOf implements wire.Codec.
func (Codec) EventOf(frame []byte, f wire.Frame) wire.Event {
	if len(frame) < HeaderLen {
		return wire.EventOther
	}
	switch EventBody(frame[HeaderLen:]) {
	case 'R':
		return wire.EventReadonly
	case 'W':
		return wire.EventWriteable
	}
	return wire.EventOther
}

// NotExecuted implements wire.Codec.
func (Codec) NotExecuted(frame []byte) string { return NotExecuted(frame).String() }

// NotExecutedReasons implements wire.Codec.
func (Codec) NotExecutedReasons() []string {
	rs := NotRunReasons()
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.String()
	}
	return names
}

// Closing implements wire.Codec.
func (Codec) Closing(frame []byte) bool { return ClosingAttachment(frame) }

// RequestTimeout implements wire.Codec: the `timeout` attachment.
func (Codec) RequestTimeout(frame []byte) (time.Duration, bool) { return RequestTimeout(frame) }

// statusNames are Codec's status names (wire.CallReader), in the order of statusIndex;
// UNKNOWN stands for a status byte Dubbo does not define.
var statusNames = [...]string{"OK", "SERIALIZATION_ERROR", "CLIENT_TIMEOUT", "SERVER_TIMEOUT", "CHANNEL_INACTIVE",
	"BAD_REQUEST", "BAD_RESPONSE", "SERVICE_NOT_FOUND", "SERVICE_ERROR", "SERVER_ERROR", "CLIENT_ERROR",
	"SERVER_THREADPOOL_EXHAUSTED", "UNKNOWN"}

// statusIndex maps a Dubbo status byte to its index in statusNames.
func statusIndex(status byte) int {
	switch status {
	case StatusOK:
		return 0
	case StatusSerializationError:
		return 1
	case StatusClientTimeout:
		return 2
	case StatusServerTimeout:
		return 3
	case StatusChannelInactive:
		return 4
	case StatusBadRequest:
		return 5
	case StatusBadResponse:
		return 6
	case StatusServiceNotFound:
		return 7
	case StatusServiceError:
		return 8
	case StatusServerError:
		return 9
	case StatusClientError:
		return 10
	case StatusThreadpoolExhausted:
		return 11
	}
	return len(statusNames) - 1
}

// StatusNames implements wire.CallReader: a new slice of the names, each call.
func (Codec) StatusNames() []string { return append([]string(nil), statusNames[:]...) }

// Call implements wire.CallReader: IdentifyRequest.
func (Codec) Call(frame []byte) (wire.CallName, bool) {
	var c Call
	ok := IdentifyRequest(frame, &c)
	return wire.CallName(c), ok
}

// Outcome implements wire.CallReader: the status byte, and the body type for business
// exceptions (ResponseException).
func (Codec) Outcome(resp []byte) (int, bool) {
	if len(resp) < HeaderLen {
		return statusIndex(0), false
	}
	return statusIndex(resp[3]), ResponseException(resp)
}

// FailureStatus implements wire.CallReader.
func (Codec) FailureStatus(why wire.Failure) int { return statusIndex(failureStatus(why)) }
