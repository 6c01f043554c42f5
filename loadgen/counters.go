package loadgen

import "sync/atomic"

// counters are the run's live tallies, updated atomically by every goroutine of the run.
type counters struct {
	connsOpen                                     atomic.Int64
	connsOpened, reconnects                       atomic.Uint64
	dialRefused, dialTimeout, dialReset, dialElse atomic.Uint64
	resets, closedByPeer, protocolErrors, other   atomic.Uint64
	left                                          atomic.Uint64 // LeaveOnReadonly closes

	scheduled, sent, unsent, oneWaySent atomic.Uint64
	paused                              atomic.Uint64 // due while Config.Pause held: not sent
	ok, exceptions, errors              atomic.Uint64
	mismatches, foreign                 atomic.Uint64 // checked bodies: answers that were not the request's body
	byStatus                            [256]atomic.Uint64
	timeouts, lost, abandoned           atomic.Uint64
	lateReplies, unknownIDs, duplicates atomic.Uint64
	inflight                            atomic.Int64 // requests + heartbeats outstanding
	hbSent, hbAnswered, hbTimedOut      atomic.Uint64
	hbLost, hbAbandoned                 atomic.Uint64
	serverHeartbeats                    atomic.Uint64
	readonly, writeable, otherEvents    atomic.Uint64
	unexpectedRequests                  atomic.Uint64

	// Triple.
	grpcStatus                           [256]atomic.Uint64 // answers by grpc-status (255: 255 and above)
	streamsWaited, streamResets, goAways atomic.Uint64
	maxOpenStreams                       atomic.Int64
}

func (c *counters) dialFailures() uint64 {
	return c.dialRefused.Load() + c.dialTimeout.Load() + c.dialReset.Load() + c.dialElse.Load()
}

// frames is every frame this process has sent: requests, heartbeats and heartbeat replies.
func (c *counters) frames() uint64 {
	return c.sent.Load() + c.oneWaySent.Load() + c.hbSent.Load() + c.serverHeartbeats.Load()
}
