package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/stormgate/stormgate/peer"
)

// Defaults and bounds. Every run is bounded in time (Duration <= MaxDuration, plus at most the connect
// phase and one Timeout of drain) and in count (Rate*Duration requests, Conns connections).
const (
	DefaultService         = "org.stormgate.Greeter"
	DefaultMethod          = "echo"
	DefaultArg             = "hello"
	DefaultTimeout         = 3 * time.Second
	DefaultConnectTimeout  = 3 * time.Second
	DefaultDialConcurrency = 4096
	DefaultMaxFrame        = 8 << 20
	MaxDuration            = 30 * time.Minute
	MaxRate                = 1_000_000
	// MaxConnsPerProcess keeps a process under the 20,000 fd limit with room for its own files.
	MaxConnsPerProcess = 19_000
	// fdHeadroom is what a process keeps for non-consumer descriptors.
	fdHeadroom = 200
)

// Config describes one load run in this process. The zero value of every optional field is valid and
// documented; Target, Conns and Duration are required.
type Config struct {
	// Target is the host:port consumers connect to.
	Target string `json:"target"`
	// Conns is the number of consumer connections opened by this process (1..MaxConnsPerProcess, and
	// below the process's RLIMIT_NOFILE).
	Conns int `json:"conns"`
	// ConnectRate paces the connect phase in connections per second; 0 opens them all at once (as fast
	// as DialConcurrency allows).
	ConnectRate float64 `json:"connect_rate"`
	// DialConcurrency caps dials in flight; 0 means DefaultDialConcurrency.
	DialConcurrency int `json:"dial_concurrency"`
	// ConnectTimeout bounds each dial; 0 means DefaultConnectTimeout.
	ConnectTimeout time.Duration `json:"connect_timeout_ns"`
	// SourceAddrs, if set, are bound as local addresses round-robin (e.g. 127.0.0.2..127.0.0.20), which
	// lifts the ~28,000 ephemeral-port limit per source address and spreads the server's hash tables.
	SourceAddrs []netip.Addr `json:"source_addrs,omitempty"`
	// HeartbeatInterval makes each connection send a Dubbo heartbeat every interval, starting at a
	// random phase so the fleet does not beat in step. 0 = no heartbeats. Minimum 10ms.
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns"`
	// ProbeOnConnect sends one heartbeat right after each connect, so FirstReply measures how long a
	// new connection waits for its first answer (accept storms). It counts as a heartbeat.
	ProbeOnConnect bool `json:"probe_on_connect"`
	// Rate is the open-loop rate of two-way requests per second across all connections; 0 = none.
	Rate float64 `json:"rate"`
	// Requests caps the number of requests scheduled; 0 means Rate*Duration.
	Requests uint64 `json:"requests"`
	// Service, Method, Arg make the request: Method(String) on Service with one string argument.
	// Empty means DefaultService, DefaultMethod, DefaultArg. Unused when BodyMax > 0.
	Service string `json:"service"`
	Method  string `json:"method"`
	Arg     string `json:"arg"`
	// Timeout is how long a request or heartbeat may wait for its answer, counted from its scheduled
	// send time; 0 means DefaultTimeout. Max 1 minute.
	Timeout time.Duration `json:"timeout_ns"`
	// Duration is the length of the request phase, after the connect phase. Required, at most MaxDuration.
	Duration time.Duration `json:"duration_ns"`
	// MaxFrame caps an incoming frame (header+body); 0 means DefaultMaxFrame. A larger frame is a
	// protocol error and closes that connection.
	MaxFrame int `json:"max_frame"`
	// Reconnect, if > 0, redials a connection that closed after this delay (Dubbo consumers reconnect);
	// 0 leaves it closed for the rest of the run.
	Reconnect time.Duration `json:"reconnect_ns"`
	// BodyMax > 0 switches to checked bodies (package peer): every request carries its own raw
	// body of a random size, log-uniform in [BodyMin, BodyMax], with a unique key, a length and a
	// checksum, instead of Method(Arg); a status-20 answer must carry exactly that body (compared
	// byte for byte; a mismatch counts in BodyMismatches, and in ForeignBodies when it is another
	// request's body). The target must echo raw bodies: `stormbench echo-provider`,
	// peer.EchoProvider, or Stormgate in front of one. BodyMin <= 0 means 1; at most 8 MiB.
	BodyMin int `json:"body_min,omitempty"`
	BodyMax int `json:"body_max,omitempty"`
	// OneWay is the fraction (0..1) of requests sent one-way, with checked bodies: nobody answers
	// them (OneWaySent counts them; an answer would count in UnknownIDs). Needs BodyMax > 0.
	OneWay float64 `json:"one_way,omitempty"`
	// KeyBase is added to every body key (request k's key is KeyBase+k+1); worker processes get
	// distinct bases, so keys are unique across a whole run.
	KeyBase uint64 `json:"key_base,omitempty"`
	// Seed seeds the body-size and one-way draws and the heartbeat phases; 0 picks one at random.
	Seed uint64 `json:"seed,omitempty"`
	// HonorReadonly skips connections that received READONLY (until WRITEABLE) when choosing where to
	// send a request, as a Dubbo consumer does. Requests with no usable connection count as Unsent.
	HonorReadonly bool `json:"honor_readonly"`
	// LeaveOnReadonly goes further, as a Dubbo consumer does once its registry drops a provider that
	// said READONLY: after READONLY the connection sends nothing more (no request, no heartbeat) and
	// is closed by this side as soon as its requests and heartbeats are answered (LeftOnReadonly
	// counts them; with Reconnect it redials after the delay). Implies HonorReadonly.
	LeaveOnReadonly bool `json:"leave_on_readonly,omitempty"`

	// WaitStart, if set, is called once after the connect phase and before the request phase, with the
	// number of open connections; the run continues when it returns nil. Worker processes use it to
	// start their request phases together.
	WaitStart func(ctx context.Context, connected int) error `json:"-"`

	// Pause, if set, holds the request phase while it is true: requests that fall due meanwhile are
	// not sent (they count in Result.Paused, not in Scheduled), heartbeats go on, and the longest
	// answer gap leaves the pause out. `stormbench load` sets it on SIGUSR1 and clears it on SIGUSR2,
	// so the soak can take its leak samples with nothing in flight.
	Pause *atomic.Bool `json:"-"`

	// Protocol is "dubbo" (the default; "" too) or "triple": h2c with prior knowledge, one stream per
	// unary call carrying the Triple request dubbo-go v3.3.0 sends without IDL (a hessian2-wrapped
	// argument: Arg as a String, or the checked body as a byte[] with BodyMax > 0, which the echo
	// provider must return as the answer's message), PINGs as heartbeats on idle connections, the
	// server's SETTINGS_MAX_CONCURRENT_STREAMS and flow-control windows kept. MaxFrame bounds an
	// answer's message; OneWay is not available (gRPC has no one-way call).
	Protocol string `json:"protocol,omitempty"`

	hooks testHooks
}

// Protocols Config.Protocol takes.
const (
	ProtocolDubbo  = "dubbo"
	ProtocolTriple = "triple"
)

func (c *Config) triple() bool { return c.Protocol == ProtocolTriple }

// testHooks lets package tests disturb the run. Zero in production.
type testHooks struct {
	// beforeRequest runs in the scheduler before request k is handed to a connection.
	beforeRequest func(k uint64)
}

func (c Config) withDefaults() Config {
	if c.LeaveOnReadonly {
		c.HonorReadonly = true
	}
	if c.DialConcurrency <= 0 {
		c.DialConcurrency = DefaultDialConcurrency
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Service == "" {
		c.Service = DefaultService
	}
	if c.Method == "" {
		c.Method = DefaultMethod
	}
	if c.Arg == "" {
		c.Arg = DefaultArg
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = DefaultMaxFrame
	}
	if c.BodyMax > 0 && c.BodyMin <= 0 {
		c.BodyMin = 1
	}
	if maxReq := uint64(math.Ceil(c.Rate * c.Duration.Seconds())); c.Requests == 0 || c.Requests > maxReq {
		c.Requests = maxReq
	}
	return c
}

// Validate reports the first problem with c (after defaults are applied).
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, _, err := net.SplitHostPort(c.Target); err != nil || c.Target == "" {
		return fmt.Errorf("loadgen: target %q is not host:port", c.Target)
	}
	if c.Conns < 1 || c.Conns > MaxConnsPerProcess {
		return fmt.Errorf("loadgen: conns %d out of 1..%d per process (use worker processes for more)", c.Conns, MaxConnsPerProcess)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && uint64(c.Conns)+fdHeadroom > lim.Cur {
		return fmt.Errorf("loadgen: conns %d needs an fd limit of %d, have %d (ulimit -n)", c.Conns, c.Conns+fdHeadroom, lim.Cur)
	}
	switch {
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("loadgen: duration %v out of (0, %v]", c.Duration, MaxDuration)
	case c.Rate < 0 || c.Rate > MaxRate || math.IsNaN(c.Rate):
		return fmt.Errorf("loadgen: rate %v out of [0, %d]", c.Rate, MaxRate)
	case c.ConnectRate < 0 || math.IsNaN(c.ConnectRate):
		return fmt.Errorf("loadgen: connect rate %v is negative", c.ConnectRate)
	case c.HeartbeatInterval < 0 || (c.HeartbeatInterval > 0 && c.HeartbeatInterval < 10*time.Millisecond):
		return fmt.Errorf("loadgen: heartbeat interval %v: want 0 or >= 10ms", c.HeartbeatInterval)
	case c.Timeout > time.Minute:
		return fmt.Errorf("loadgen: timeout %v above 1m", c.Timeout)
	case c.Reconnect < 0:
		return errors.New("loadgen: negative reconnect delay")
	case c.MaxFrame < 64:
		return fmt.Errorf("loadgen: max frame %d below 64", c.MaxFrame)
	case len(c.Service) > 4096 || len(c.Method) > 4096 || len(c.Arg) > 4<<20:
		return errors.New("loadgen: service/method (4 KiB) or arg (4 MiB) too long")
	case c.BodyMax < 0 || c.BodyMax > peer.MaxCheckedBody || c.BodyMax > 0 && c.BodyMin > c.BodyMax:
		return fmt.Errorf("loadgen: body sizes %d..%d: want 1 <= min <= max <= %d", c.BodyMin, c.BodyMax, peer.MaxCheckedBody)
	case c.BodyMax+64 > c.MaxFrame:
		return fmt.Errorf("loadgen: body max %d does not fit the max frame %d (the echo comes back as big)", c.BodyMax, c.MaxFrame)
	case c.OneWay < 0 || c.OneWay > 1 || math.IsNaN(c.OneWay):
		return fmt.Errorf("loadgen: one-way fraction %v out of [0, 1]", c.OneWay)
	case c.OneWay > 0 && c.BodyMax == 0:
		return errors.New("loadgen: one-way requests need checked bodies (set the body max)")
	}
	switch c.Protocol {
	case "", ProtocolDubbo:
	case ProtocolTriple:
		switch {
		case c.OneWay > 0:
			return errors.New("loadgen: triple has no one-way calls (set the one-way fraction to 0)")
		case !peer.TripleStringOK(c.Arg):
			return fmt.Errorf("loadgen: triple arg longer than %d UTF-16 units", peer.MaxTripleString)
		case c.BodyMax+c.BodyMax/1024+64 > c.MaxFrame:
			return fmt.Errorf("loadgen: body max %d does not fit the max message %d with its Triple wrapping", c.BodyMax, c.MaxFrame)
		}
	default:
		return fmt.Errorf("loadgen: protocol %q: want dubbo or triple", c.Protocol)
	}
	for _, a := range c.SourceAddrs {
		if !a.IsValid() {
			return errors.New("loadgen: invalid source address")
		}
	}
	return nil
}
