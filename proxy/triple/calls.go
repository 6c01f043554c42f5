package triple

import (
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// Per-method metrics and the access log for HTTP/2 calls (Triple, gRPC): the same series, the same
// table and the same access log as Dubbo 2's (proxy/methods.go), read from the call's headers.
//
//	| what                | read from                                 | when
//	|---------------------|-------------------------------------------|-------------------------------------
//	| service, method     | :path "/<service>/<method>"               | the request head arrives (event)
//	| group, version      | tri-service-group, tri-service-version    | the same head
//	| status              | the provider's grpc-status, else its      | the answer's end is handed to the
//	|                     | :status (404 -> UNIMPLEMENTED), else      | consumer's writer (countLocked),
//	|                     | UNKNOWN; a reset's code; Stormgate's own  | before the consumer can see it
//	|                     | UNAVAILABLE; CANCELLED when the consumer  |
//	|                     | ended the call                            |
//	| exception           | dubbo-go's business error (grpc-status 17)|
//	| duration            | the head's arrival to that moment         |
//	| bytes               | DATA payloads each way                    | as they pass
//	| held                | the call waited for a provider stream     | h2Pool.open
//
// Every call is counted exactly once (h2Call.counted, under the session's mu): at its end toward the
// consumer, which finishLocked makes exactly once; an end no answer explains (the consumer's RST_STREAM
// or its connection closing, a stream Stormgate reset because its consumer stopped reading) counts as
// CANCELLED, answered by the consumer. The counts go to the h2 pool's shard, Stormgate's own answers to
// the server's local shard, as for Dubbo.

// identifyH2 reads what an HTTP/2 request head calls (per-method metrics on): its index in the call
// table (Env.Method), MethodUnknown when the head does not name a call as gRPC and Triple do.
func identifyH2(env proxy.Env, fields []h2.HeaderField) uint32 {
	c, ok := h2.CallOf(fields)
	if !ok {
		return proxy.MethodUnknown
	}
	return env.Method(c.Service, c.Version, c.Group, c.Method)
}

// answerStatus is the status of the provider's answer to c that ends with trailers (nil: with DATA,
// no trailers): grpc-status when there is one, else what a gRPC client makes of the head's :status.
// dubbo-go's business error (h2.TripleBizError) is OK with an exception, as Dubbo 2's business
// exceptions are, so a service reads the same over both protocols. Under the session's mu.
func (c *h2Call) answerStatus(env proxy.Env, trailers []h2.HeaderField) (status int, exception bool) {
	if code, ok := h2.GRPCCode(trailers); ok {
		if code == h2.TripleBizError {
			return grpcStatus(env, h2.GRPCOK), true
		}
		return grpcStatus(env, code), false
	}
	if c.httpStatus != 0 && c.httpStatus != 200 {
		return grpcStatus(env, h2.GRPCFromHTTPStatus(c.httpStatus)), false
	}
	return grpcStatus(env, h2.GRPCUnknown), false
}

// answeredLocked counts the provider's answer to c, which ends with trailers (nil: with DATA). Under
// h.mu, before the frames that end the call go to the writer.
func (h *h2Session) answeredLocked(c *h2Call, trailers []h2.HeaderField) {
	status, exc := c.answerStatus(h.env, trailers)
	h.countLocked(c, status, exc, proxy.NoLocalReply)
}

// endedLocked counts a call that ended otherwise: status (an index into statusVocab.names), and who
// ended it (a replyReason when Stormgate answered, NoLocalReply for a provider's reset, ConsumerEnded).
func (h *h2Session) endedLocked(c *h2Call, status int, by proxy.ReplyReason) {
	h.countLocked(c, status, false, by)
}

// countLocked counts how a call ended, once. Under h.mu, before the frames that end the call go to
// the writer.
func (h *h2Session) countLocked(c *h2Call, status int, exc bool, by proxy.ReplyReason) {
	if c.counted {
		return
	}
	c.counted = true
	h.env.CallEnded(&h.hp.calls, h.consumer, proxy.CallEnd{Method: c.method, Status: status, Exception: exc, By: by,
		Held: c.waited.Load(), Arrived: c.arrived, ReqBytes: c.reqBytes, RespBytes: c.respBytes})
}

// grpcStatus is a gRPC status code's index in the status vocabulary.
func grpcStatus(env proxy.Env, code int) int {
	return env.Status(proxy.ProtoTriple, h2.StatusIndex(code))
}
