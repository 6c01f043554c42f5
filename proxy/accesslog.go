package proxy

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
)

// accessLog writes one structured line per selected call (access_log settings):
//
//	{"level":"info","ts":"…","logger":"access","msg":"call","consumer":"10.0.0.7:51234","protocol":"dubbo",
//	 "service":"gray/org.example.Greeter:1.0.0","method":"sayHello","status":"OK",
//	 "exception":false,"duration":"1.2ms","request_bytes":212,"response_bytes":40,
//	 "held":false,"reheld":false,"answered_by":"provider"}
//
// answered_by is "stormgate" when Stormgate answered the call itself, and then reason
// says why (the reason label of stormgate_local_replies_total); "consumer" for an HTTP/2
// call its consumer ended before the answer did (status CANCELLED: proxy/triple/calls.go). An
// HTTP/2 call's bytes are its DATA payloads each way (gRPC's 5-byte message prefixes
// included, headers not: they are re-encoded on the way). A call is selected when
// it failed (access_log.failed), was slow (slow_threshold) or was sampled (sample_rate);
// then a token bucket of max_per_second lines per second lets it through or counts it as
// dropped, so a flood of failures costs at most that many lines. The decision runs on
// the goroutine that answers the call, before the answer is written; with the log off
// it costs one branch (callAnswered).
type accessLog struct {
	log     *zap.Logger
	limiter atomic.Pointer[rate.Limiter] // rebuilt when max_per_second changes
	lines   prometheus.Counter
	dropped prometheus.Counter
}

func (a *accessLog) init(log *zap.Logger) {
	a.log = log
	a.lines = prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_access_log_lines_total",
		Help: "Access log lines written."})
	a.dropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_access_log_dropped_total",
		Help: "Calls the access log selected but did not write: over access_log.max_per_second."})
}

// offer logs the call if the settings select it and the rate allows.
func (a *accessLog) offer(s *Server, cfg *Config, sess *session, call callRef, status int, exception bool,
	local ReplyReason, d time.Duration, respBytes int) {
	al := &cfg.AccessLog
	failed := status != 0 || exception || local != NoLocalReply
	if !(al.Failed && failed) && !(al.SlowThreshold > 0 && d >= al.SlowThreshold) &&
		!(al.SampleRate > 0 && rand.Float64() < al.SampleRate) {
		return
	}
	lim := a.limiter.Load()
	if lim == nil || lim.Burst() != al.MaxPerSecond {
		lim = rate.NewLimiter(rate.Limit(al.MaxPerSecond), al.MaxPerSecond)
		a.limiter.Store(lim)
	}
	if !lim.AllowN(time.Unix(0, s.now()), 1) {
		a.dropped.Inc()
		return
	}
	lbl := s.calls.table.label(call.method)
	by, reason := "provider", ""
	switch local {
	case NoLocalReply:
	case ConsumerEnded:
		by = "consumer"
	default:
		by, reason = "stormgate", local.String()
	}
	fields := []zap.Field{
		zap.Stringer("consumer", sess.remote),
		zap.String("protocol", protoNames[sess.proto.Load()]),
		zap.String("service", lbl.service),
		zap.String("method", lbl.method),
		zap.String("status", s.statuses.name(status)),
		zap.Bool("exception", exception),
		zap.Duration("duration", d),
		zap.Uint32("request_bytes", call.size),
		zap.Int("response_bytes", respBytes),
		zap.Bool("held", call.hold&callHeld != 0),
		zap.Bool("reheld", call.hold&callReheld != 0),
		zap.String("answered_by", by),
	}
	if reason != "" {
		fields = append(fields, zap.String("reason", reason))
	}
	a.lines.Inc()
	a.log.Info("call", fields...)
}
