package triple

import (
	"math"
	"time"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// At most once for HTTP/2 calls (proxy/deadline.go's rule, with gRPC's header): a Triple or gRPC consumer says
// how long it waits in grpc-timeout (dubbo-go, Java Triple and grpc-go send it with every call that has a
// deadline), so a call that has to wait for a provider stream, or waits again after a refusal
// (replay.go), is never handed to the provider after
//
//	sendBy    = arrived + grpc-timeout - hold.deadline_margin
//	holdUntil = min(sendBy, arrived + hold.max_timeout)        a call carrying grpc-timeout
//	          = arrived + hold.timeout                         one carrying none (sendBy: never)
//
// Past sendBy it is answered by Stormgate with grpc-status 4 DEADLINE_EXCEEDED (local reply "deadline",
// hold outcome "deadline") and never sent: its consumer is about to give up and may be retrying it on
// another provider. hold.max_timeout 0 ignores consumers' timeouts, as for Dubbo. The consumer's own
// RST_STREAM at its deadline ends a waiting call too (cancel); sendBy also covers the margin before it.

// h2SendBy is a call's sendBy, from its request head (fields) and the settings.
func h2SendBy(fields []h2.HeaderField, arrived int64, cfg *proxy.Config) int64 {
	if cfg.HoldMaxTimeout <= 0 {
		return proxy.NoDeadline
	}
	t, ok := h2.GRPCTimeout(fields)
	if !ok {
		return proxy.NoDeadline
	}
	return arrived + int64(min(t, time.Duration(math.MaxInt64-arrived))) - int64(cfg.DeadlineMargin)
}

// h2HoldUntil is how long c may wait for a provider stream, counted from its arrival.
func h2HoldUntil(c *h2Call, cfg *proxy.Config) int64 {
	if c.sendBy == proxy.NoDeadline {
		return c.arrived + int64(cfg.HoldTimeout)
	}
	return min(c.sendBy, c.arrived+int64(cfg.HoldMaxTimeout))
}

// rearm works out the end of every call in the hold queue again from its arrival under cfg (a live
// change of hold.timeout, hold.max_timeout or hold.deadline_margin, proxy/rearm.go) and re-arms its timer.
func (hp *h2Pool) rearm(cfg *proxy.Config) {
	env := hp.env
	now := env.Now()
	hp.mu.Lock()
	defer hp.unlock()
	hp.prov.Hold().EachCall(func(w proxy.Waiting) {
		c := w.(*h2Call)
		c.sendBy = h2SendBy(c.head, c.arrived, cfg) // the head is kept while the call waits
		env.Wheel().Schedule(&c.hold, max(time.Duration(h2HoldUntil(c, cfg)-now), 0))
	})
}

// pastSendBy reports whether c may no longer be sent at now.
func (c *h2Call) pastSendBy(now int64) bool { return c.sendBy != proxy.NoDeadline && now >= c.sendBy }

// h2DeadlineMsg is the message of the answer to a call whose consumer's deadline would pass before the
// provider could answer.
const h2DeadlineMsg = "stormgate: not sent: the call's own timeout (grpc-timeout) would have passed before the " +
	"provider could answer (hold.deadline_margin before the consumer's deadline); the provider never received it"
