package proxy

import (
	"fmt"
	"slices"
	"time"
)

// ReadonlyPolicy says what Stormgate does when the provider announces READONLY.
type ReadonlyPolicy uint8

const (
	// ReadonlyHold keeps consumers unaware: new requests wait in the hold queue until a
	// writable provider connection is back.
	ReadonlyHold ReadonlyPolicy = iota
	// ReadonlyPropagate sends READONLY to every consumer so they fail over, and
	// WRITEABLE when the provider is writable again.
	ReadonlyPropagate
)

// Config is the proxy's part of the settings, fully resolved: every field means
// exactly what the settings schema says (docs/configuration.md), zero included, and
// the proxy applies no defaults of its own (they live in settings.Defaults; build a
// Config with settings.ProxyConfig). It is an immutable value: a change is a new Config
// passed to Server.Update. New and Update refuse values no valid settings produce.
type Config struct {
	// Upstream is the provider address (host:port). In transparent mode it is unused:
	// each original destination port p maps to 127.0.0.1:p.
	Upstream       string
	UpstreamConns  int           // M, connections to the provider; 1..64
	ConnectTimeout time.Duration // one dial; > 0
	BackoffBase    time.Duration // first reconnect backoff window; > 0
	BackoffMax     time.Duration // backoff cap; >= BackoffBase
	// Warmup ramps the forwarded request rate linearly after the provider comes back
	// from having no usable connection; 0: no ramp.
	Warmup time.Duration
	// WriteTimeout declares a provider connection dead when the kernel has taken no
	// byte of the queued requests for this long; 0: never.
	WriteTimeout time.Duration
	// MaxQueuedBytesPerUpstream bounds the bytes waiting in Stormgate for one provider
	// connection; over it, new requests go to another connection or are held. An empty
	// connection always takes one frame, whatever its size.
	MaxQueuedBytesPerUpstream int
	// LargeRequestBytes: frames larger than this go to the pool's last connection, kept
	// for them when there are at least two, and other frames avoid it (dubboUpstream.pick); 0:
	// every frame goes to the least loaded connection.
	LargeRequestBytes int
	// Protocols is what the provider speaks (upstream.protocol): the pools open
	// UpstreamConns connections for each, and a consumer of another protocol is
	// closed. Zero is Dubbo alone.
	Protocols Protocols

	// HoldTimeout is the longest a request that carries no timeout of its own waits
	// for a usable connection; 0: no holding at all, requests fail at once.
	HoldTimeout time.Duration
	// HoldMaxTimeout bounds the wait of a request that carries its consumer's timeout
	// (the Dubbo `timeout` attachment): it waits until that timeout less
	// DeadlineMargin, at most this long. 0: consumers' timeouts are not read, every
	// request waits up to HoldTimeout (and may be sent after its consumer gave up).
	HoldMaxTimeout time.Duration
	// DeadlineMargin is how long before its consumer's own deadline a request must
	// have left Stormgate: the provider's network and queueing time, and the answer's
	// way back. A request is never handed to the provider later than that.
	DeadlineMargin  time.Duration
	HoldMaxRequests int // requests the hold queue keeps; 0: none
	HoldMaxBytes    int // bytes the hold queue keeps; 0: none
	// HoldMaxBytesPerConsumer bounds the bytes of one consumer's requests held while
	// the provider is away; past it they are answered (overloaded). 0: no bound.
	HoldMaxBytesPerConsumer int
	// NotExecutedRetries is how many times a request goes back to the hold queue
	// when the provider answers that it never ran it; 0: such answers are passed on.
	NotExecutedRetries int
	// NotExecutedWindow is how long after a provider connection opens, or after the
	// provider says READONLY, WRITEABLE or closing, those answers are re-held; 0: never.
	NotExecutedWindow time.Duration

	DownstreamIdleTimeout time.Duration // close a consumer that sent nothing this long; 0: never
	UpstreamInterval      time.Duration // heartbeat check period of a provider connection; > 0
	UpstreamJitter        float64       // fraction of UpstreamInterval to jitter by; 0..0.5
	UpstreamMaxMissed     int           // intervals a heartbeat may go unanswered; >= 1
	// UpstreamHungTimeout declares a provider connection hung when something is owed
	// on it (a request's or a heartbeat's answer) and nothing has been read from it
	// for this long although a heartbeat went out at least half of it ago, or when
	// the kernel has taken no byte of it for this long: it takes no new requests
	// until the provider is heard again, and a provider with no other usable
	// connection is not ready (/readyz 503, READONLY to its consumers). 0: never.
	UpstreamHungTimeout time.Duration

	MaxFrameBytes         int // largest frame, header included
	MaxInflightPerConn    int // two-way requests in flight per consumer; >= 1
	MaxQueuedBytesPerConn int // unread response bytes per consumer before it is closed
	// MaxQueuedBytesPerConsumer: a consumer with more bytes of requests waiting in
	// Stormgate for a provider that serves is not read until half have drained
	// (backpressure.go); 0: never paused.
	MaxQueuedBytesPerConsumer int
	MaxRequestAge             time.Duration // a request pending this long is answered with an error; > 0
	// FrameReadTimeout closes a consumer that has sent part of a frame and not the rest
	// for this long, and resets an HTTP/2 consumer's stream whose window it keeps shut
	// this long while the answer waits (proxy/triple/stall.go); 0: never (the idle timeout and
	// MaxQueuedBytesPerConn still apply).
	FrameReadTimeout time.Duration
	// MaxBufferedBytes bounds, across the process, the bytes kept because a peer is
	// slow or absent (see budget); > 0.
	MaxBufferedBytes int64

	ReadonlyPolicy ReadonlyPolicy
	DrainTimeout   time.Duration // longest a drain waits for requests in flight; 0: close at once

	// Transparent: pools are per original destination port, limited to InboundPorts.
	Transparent  bool
	InboundPorts []uint16

	// MaxMethods bounds the distinct service/method pairs of the per-method metrics
	// (methods.go); 0: no per-method metrics, requests are not decoded. <= 10,000.
	MaxMethods int
	AccessLog  AccessLogConfig // accesslog.go

	// HTTP2 is what Stormgate announces in its HTTP/2 SETTINGS (http2.*). A connection keeps
	// what it announced, so a change applies to connections opened after it.
	HTTP2 HTTP2Config
}

// HTTP2Config is what Stormgate announces to HTTP/2 peers (proxy/triple/session.go, proxy/triple/pool.go).
type HTTP2Config struct {
	// MaxConcurrentStreams is the streams one consumer may have open at once; the smaller
	// of it and MaxInflightPerConn is announced. >= 1.
	MaxConcurrentStreams int
	// InitialWindowSize is the stream receive window announced to consumers and providers:
	// what one stream can make Stormgate hold. 1..2^31-1.
	InitialWindowSize int
	// MaxHeaderListSize bounds a header list (and an encoded block) from consumers and
	// providers. >= 1.
	MaxHeaderListSize int
}

// AccessLogConfig selects the calls the access log writes (accesslog.go).
type AccessLogConfig struct {
	Enabled       bool          // nothing is logged unless set
	Failed        bool          // every call whose answer is not OK, a business exception, or Stormgate's own
	SlowThreshold time.Duration // every call at least this slow; 0: none
	SampleRate    float64       // this fraction of the other calls, 0..1
	MaxPerSecond  int           // lines per second at most (burst the same); >= 1 when Enabled
}

// validate rejects what the proxy cannot run with. settings.Validate gives users the
// friendly version of the same rules; these are the proxy's own invariants.
func (c *Config) validate() error {
	switch {
	case !c.Transparent && c.Upstream == "":
		return fmt.Errorf("upstream.address is empty: set the provider address, e.g. 127.0.0.1:20880")
	case c.UpstreamConns < 1 || c.UpstreamConns > 64:
		return fmt.Errorf("upstream.connections: %d is out of range; must be between 1 and 64", c.UpstreamConns)
	case c.ConnectTimeout <= 0 || c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return fmt.Errorf("upstream: connect_timeout %v, backoff_base %v, backoff_max %v: must be positive, "+
			"backoff_max at least backoff_base", c.ConnectTimeout, c.BackoffBase, c.BackoffMax)
	case c.UpstreamInterval <= 0 || c.UpstreamMaxMissed < 1:
		return fmt.Errorf("keepalive: upstream_interval %v must be positive and upstream_max_missed %d at least 1",
			c.UpstreamInterval, c.UpstreamMaxMissed)
	case c.UpstreamJitter < 0 || c.UpstreamJitter > 0.5:
		return fmt.Errorf("keepalive.upstream_jitter: %v is out of range; must be between 0 and 0.5", c.UpstreamJitter)
	case c.MaxFrameBytes < 32:
		return fmt.Errorf("limits.max_frame_bytes: %d is too small", c.MaxFrameBytes)
	case c.MaxInflightPerConn < 1 || c.MaxRequestAge <= 0 || c.MaxBufferedBytes <= 0:
		return fmt.Errorf("limits: max_inflight_per_connection %d, max_request_age %v, max_buffered_bytes %d: must be positive",
			c.MaxInflightPerConn, c.MaxRequestAge, c.MaxBufferedBytes)
	case c.HoldTimeout < 0 || c.HoldMaxTimeout < 0 || c.DeadlineMargin < 0 || c.UpstreamHungTimeout < 0 || c.HoldMaxRequests < 0 || c.HoldMaxBytes < 0 || c.DownstreamIdleTimeout < 0 ||
		c.FrameReadTimeout < 0 || c.WriteTimeout < 0 || c.DrainTimeout < 0 || c.Warmup < 0 ||
		c.MaxQueuedBytesPerUpstream < 0 || c.LargeRequestBytes < 0 || c.MaxQueuedBytesPerConn < 0 ||
		c.MaxQueuedBytesPerConsumer < 0 || c.HoldMaxBytesPerConsumer < 0 || c.NotExecutedRetries < 0 || c.NotExecutedWindow < 0:
		return fmt.Errorf("a negative duration or size in the proxy settings: %+v", *c)
	case c.MaxMethods < 0 || c.MaxMethods > maxMethodsLimit:
		return fmt.Errorf("metrics.max_methods: %d is out of range; must be between 0 and %d", c.MaxMethods, maxMethodsLimit)
	case c.AccessLog.Enabled && (c.AccessLog.MaxPerSecond < 1 || c.AccessLog.SampleRate < 0 || c.AccessLog.SampleRate > 1 || c.AccessLog.SlowThreshold < 0):
		return fmt.Errorf("access_log: max_per_second %d must be at least 1, sample_rate %v between 0 and 1, slow_threshold %v not negative",
			c.AccessLog.MaxPerSecond, c.AccessLog.SampleRate, c.AccessLog.SlowThreshold)
	case c.HTTP2.MaxConcurrentStreams < 1 || c.HTTP2.InitialWindowSize < 1 || c.HTTP2.InitialWindowSize > maxH2Window ||
		c.HTTP2.MaxHeaderListSize < 1:
		return fmt.Errorf("http2: max_concurrent_streams %d, initial_window_size %d, max_header_list_size %d: must be "+
			"positive, the window at most 2^31-1", c.HTTP2.MaxConcurrentStreams, c.HTTP2.InitialWindowSize, c.HTTP2.MaxHeaderListSize)
	case c.Transparent && len(c.InboundPorts) == 0:
		return fmt.Errorf("listener.inbound_ports is empty: transparent mode forwards only to listed ports")
	}
	return nil
}

// maxH2Window is the largest HTTP/2 flow-control window (RFC 9113 §6.9.1).
const maxH2Window = 1<<31 - 1

func (c *Config) portAllowed(p uint16) bool { return slices.Contains(c.InboundPorts, p) }

// Protocols is a set of wire protocols a provider speaks (upstream.protocol).
type Protocols uint8

// The protocols.
const (
	ProtoDubbo  Protocols = 1 << iota // Dubbo 2
	ProtoTriple                       // Dubbo 3 Triple and gRPC: HTTP/2 over cleartext TCP (h2c)
)

// Dubbo reports whether the set holds Dubbo 2 (the empty set does: Dubbo is the default).
func (p Protocols) Dubbo() bool { return p == 0 || p&ProtoDubbo != 0 }

// Triple reports whether the set holds Triple.
func (p Protocols) Triple() bool { return p&ProtoTriple != 0 }
