package proxy

import (
	"time"

	"github.com/stormgate/stormgate/proxy/h2"
)

// Per-method metrics and the access log for HTTP/2 calls (Triple, gRPC): the same series, the same
// table and the same access log as Dubbo 2's (methods.go), read from the call's headers.
//
//	| what                | read from                                 | when
//	|---------------------|-------------------------------------------|-------------------------------------
//	| service, method     | :path "/<service>/<method>"               | the request head arrives (event)
//	| group, version      | tri-service-group, tri-service-version    | the same head
//	| status              | the provider's grpc-status, else its      | the answer's end is handed to the
//	|                     | :status (404 -> UNIMPLEMENTED), else      | consumer's writer (endedLocked),
//	|                     | UNKNOWN; a reset's code; Stormgate's own  | before the consumer can see it
//	|                     | UNAVAILABLE; CANCELLED when the consumer  |
//	|                     | ended the call                            |
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
// table, callUnknown when the head does not name a call as gRPC and Triple do. No allocation for a pair
// seen before.
func (s *Server) identifyH2(fields []h2.HeaderField, cfg *Config) uint32 {
	if cfg.MaxMethods == 0 {
		return callUnknown
	}
	c, ok := h2.CallOf(fields)
	if !ok {
		return callUnknown
	}
	return indexNames(&s.calls.table, names[string](c))
}

// answerStatus is the status of the provider's answer to c that ends with trailers (nil: with DATA,
// no trailers): grpc-status when there is one, else what a gRPC client makes of the head's :status.
// Under the session's mu.
func (c *h2Call) answerStatus(trailers []h2.HeaderField) int {
	if code, ok := h2.GRPCCode(trailers); ok {
		return grpcStatusIndex(code)
	}
	if c.httpStatus != 0 && c.httpStatus != 200 {
		return grpcStatusIndex(h2.GRPCFromHTTPStatus(c.httpStatus))
	}
	return statusUnknown
}

// endedLocked counts how a call ended, once: status (an index into callStatusNames), and who ended
// it (a replyReason when Stormgate answered, noLocalReply for the provider, consumerEnded). Under h.mu,
// before the frames that end the call go to the writer.
func (h *h2Session) endedLocked(c *h2Call, status int, by replyReason) {
	if c.counted {
		return
	}
	c.counted = true
	srv := h.sess.srv
	cfg := srv.cfg.Load()
	if cfg.MaxMethods == 0 && !cfg.AccessLog.Enabled {
		return
	}
	sh := &h.hp.calls
	if by < nReplyReasons {
		sh = &srv.calls.local
	}
	call := callRef{method: c.method, size: uint32(min(c.reqBytes, 1<<32-1))}
	if c.waited.Load() {
		call.hold = callHeld
	}
	srv.callEnded(cfg, sh, h.sess, call, status, false, by, time.Duration(srv.now()-c.arrived), int(c.respBytes))
}
