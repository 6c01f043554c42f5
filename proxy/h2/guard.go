package h2

import "time"

// Guard names one protection against a known HTTP/2 attack or abuse. Each trip is counted in
// Counters.Guards; most end the connection with GOAWAY(ENHANCE_YOUR_CALM), the rest reset one stream.
type Guard uint8

// Guards, with what tripping each does.
const (
	GuardRapidReset     Guard = iota // streams reset (by the peer, or provoked from us) faster than the reset budget: GOAWAY ENHANCE_YOUR_CALM (CVE-2023-44487, CVE-2025-8671)
	GuardContinuation                // header block over its byte bound, or over its CONTINUATION-count bound (8 beyond one per 16 KiB of the block): GOAWAY ENHANCE_YOUR_CALM (CVE-2024-27316 family)
	GuardPingFlood                   // PINGs faster than the control budget: GOAWAY ENHANCE_YOUR_CALM
	GuardSettingsFlood               // SETTINGS faster than the control budget: GOAWAY ENHANCE_YOUR_CALM
	GuardControlFlood                // PRIORITY, WINDOW_UPDATE, unknown frames and frames on closed streams faster than the control budget: GOAWAY ENHANCE_YOUR_CALM
	GuardEmptyFrames                 // too many consecutive frames with no payload and no END_STREAM: GOAWAY ENHANCE_YOUR_CALM
	GuardOutboundQueue               // answers (ACKs, RST_STREAMs) queued faster than the owner writes them: GOAWAY ENHANCE_YOUR_CALM
	GuardHeaderList                  // decoded header list over the bound: RST_STREAM ENHANCE_YOUR_CALM (the block itself is bounded by GuardContinuation)
	GuardTooManyStreams              // a stream beyond SETTINGS_MAX_CONCURRENT_STREAMS: RST_STREAM REFUSED_STREAM
	GuardZeroWindow                  // a stream with data to send and no window for longer than the stall timeout: RST_STREAM CANCEL
	GuardStreamID                    // a new stream id not above every earlier one, or of the wrong parity: GOAWAY PROTOCOL_ERROR
	GuardClosedStream                // DATA or HEADERS on a closed stream: RST_STREAM or GOAWAY STREAM_CLOSED
	GuardPreface                     // a malformed client preface or a first frame other than SETTINGS: GOAWAY PROTOCOL_ERROR
	NumGuards
)

var guardNames = [NumGuards]string{
	"rapid_reset", "continuation_flood", "ping_flood", "settings_flood", "control_flood", "empty_frames",
	"outbound_queue", "header_list_size", "too_many_streams", "zero_window_stall", "stream_id", "closed_stream",
	"preface",
}

// String returns the guard's metric label, e.g. "rapid_reset".
func (g Guard) String() string {
	if g < NumGuards {
		return guardNames[g]
	}
	return "unknown"
}

// Limits are the guards' bounds. The zero value of each field means its default (DefaultLimits).
type Limits struct {
	// ResetBurst and ResetRate are the stream reset budget: a token bucket of ResetBurst tokens refilled at
	// ResetRate a second; every stream the peer resets before its answer completed, and every stream this
	// side resets because of the peer's behaviour, takes one token.
	ResetBurst int
	ResetRate  float64
	// ControlBurst and ControlRate are the control-frame budget (PING, SETTINGS, PRIORITY, WINDOW_UPDATE,
	// unknown types, frames on closed streams). A PING or WINDOW_UPDATE that follows DATA or HEADERS this
	// side sent is free: that is what honest peers' keepalive, BDP estimation and flow control look like.
	ControlBurst int
	ControlRate  float64
	// MaxEmptyFrames is how many consecutive frames without payload and without END_STREAM are accepted.
	MaxEmptyFrames int
	// MaxQueuedControl bounds answers queued in Output and not yet taken by the owner.
	MaxQueuedControl int
	// MaxContinuations bounds the CONTINUATION frames per header block beyond one for every 16 KiB the
	// block holds (Assembler): a block within the header list bound sent in 16 KiB frames never trips it,
	// a run of small or empty CONTINUATIONs does after MaxContinuations.
	MaxContinuations int
	// StallTimeout is how long a stream may want to send with no window before it is reset.
	StallTimeout time.Duration
}

// DefaultLimits are the guards' defaults. The reset budget is nghttp2's (1,000 burst, 33/s); the
// continuation bound is nghttp2's (8), beyond the frames a block's size pays for; the empty-frame bound is
// Envoy's order of magnitude; the control budget allows an honest peer's keepalive PINGs (every 10 s for
// dubbo-go, 60 s for Java) many times over.
func DefaultLimits() Limits {
	return Limits{
		ResetBurst:       1000,
		ResetRate:        33,
		ControlBurst:     200,
		ControlRate:      50,
		MaxEmptyFrames:   8,
		MaxQueuedControl: 1000,
		MaxContinuations: DefaultMaxContinuations,
		StallTimeout:     30 * time.Second,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	orDefault(&l.ResetBurst, d.ResetBurst)
	orDefault(&l.ResetRate, d.ResetRate)
	orDefault(&l.ControlBurst, d.ControlBurst)
	orDefault(&l.ControlRate, d.ControlRate)
	orDefault(&l.MaxEmptyFrames, d.MaxEmptyFrames)
	orDefault(&l.MaxQueuedControl, d.MaxQueuedControl)
	orDefault(&l.MaxContinuations, d.MaxContinuations)
	orDefault(&l.StallTimeout, d.StallTimeout)
	return l
}

// orDefault replaces a zero or negative *v with d.
func orDefault[T int | uint32 | float64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// bucket is a token bucket in the owner's clock (nanoseconds); no timer, no allocation.
type bucket struct {
	tokens float64
	burst  float64
	rate   float64 // tokens per nanosecond
	last   int64
}

func newBucket(burst int, perSecond float64) bucket {
	return bucket{tokens: float64(burst), burst: float64(burst), rate: perSecond / 1e9}
}

// take spends one token; false when none is left.
func (b *bucket) take(now int64) bool {
	if b.last != 0 && now > b.last {
		b.tokens = min(b.burst, b.tokens+float64(now-b.last)*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Guard errors: connection errors with ENHANCE_YOUR_CALM or PROTOCOL_ERROR.
var (
	errRapidReset     = connErr(ErrCodeEnhanceYourCalm, "stream resets over budget")
	errPingFlood      = connErr(ErrCodeEnhanceYourCalm, "PINGs over budget")
	errSettingsFlood  = connErr(ErrCodeEnhanceYourCalm, "SETTINGS over budget")
	errControlFlood   = connErr(ErrCodeEnhanceYourCalm, "control frames over budget")
	errEmptyFrames    = connErr(ErrCodeEnhanceYourCalm, "too many consecutive empty frames")
	errOutboundQueue  = connErr(ErrCodeEnhanceYourCalm, "answers queued faster than they are written")
	errStreamIDOrder  = connErr(ErrCodeProtocol, "new stream id not greater than every earlier one")
	errStreamIDParity = connErr(ErrCodeProtocol, "stream id of the wrong parity for its initiator")
	errClosedHeaders  = connErr(ErrCodeStreamClosed, "HEADERS on a closed stream")
	errIdleStream     = connErr(ErrCodeProtocol, "frame on an idle stream")
	errFirstFrame     = connErr(ErrCodeProtocol, "first frame is not SETTINGS")
)
