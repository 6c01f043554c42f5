package proxy

import (
	"fmt"
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

// Config is the proxy's part of the settings. It is an immutable value: a change is
// a new Config passed to Server.Update. The zero value of a field means its default.
type Config struct {
	// Upstream is the provider address (host:port). In transparent mode it is unused:
	// each original destination port p maps to 127.0.0.1:p.
	Upstream string
	// UpstreamConns is M, the number of connections to the provider (default 4).
	UpstreamConns  int
	ConnectTimeout time.Duration // default 1s
	BackoffBase    time.Duration // default 50ms
	BackoffMax     time.Duration // default 2s
	// Warmup ramps the forwarded request rate linearly after the provider comes
	// back from having no usable connection; 0 disables it.
	Warmup time.Duration

	HoldTimeout     time.Duration // default 3s; negative disables holding
	HoldMaxRequests int           // default 10,000
	HoldMaxBytes    int           // default 64 MiB

	DownstreamIdleTimeout time.Duration // default 180s
	UpstreamInterval      time.Duration // heartbeat when idle this long; default 30s
	UpstreamJitter        float64       // default 0.2 (±20%)
	UpstreamMaxMissed     int           // default 3

	MaxFrameBytes         int           // default 8 MiB + header
	MaxInflightPerConn    int           // per consumer connection; default 10,000
	MaxQueuedBytesPerConn int           // unread response bytes per consumer; default 4 MiB
	MaxRequestAge         time.Duration // default 60s

	ReadonlyPolicy ReadonlyPolicy
	DrainTimeout   time.Duration // default 10s

	// Transparent: pools are per original destination port, limited to InboundPorts.
	Transparent  bool
	InboundPorts []uint16
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	setD := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	setI := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setI(&c.UpstreamConns, 4)
	setD(&c.ConnectTimeout, time.Second)
	setD(&c.BackoffBase, 50*time.Millisecond)
	setD(&c.BackoffMax, 2*time.Second)
	setD(&c.HoldTimeout, 3*time.Second)
	setI(&c.HoldMaxRequests, 10000)
	setI(&c.HoldMaxBytes, 64<<20)
	setD(&c.DownstreamIdleTimeout, 180*time.Second)
	setD(&c.UpstreamInterval, 30*time.Second)
	if c.UpstreamJitter == 0 {
		c.UpstreamJitter = 0.2
	}
	setI(&c.UpstreamMaxMissed, 3)
	setI(&c.MaxFrameBytes, 8<<20+16)
	setI(&c.MaxInflightPerConn, 10000)
	setI(&c.MaxQueuedBytesPerConn, 4<<20)
	setD(&c.MaxRequestAge, 60*time.Second)
	setD(&c.DrainTimeout, 10*time.Second)
	return c
}

// validate reports the first field that cannot work.
func (c Config) validate() error {
	switch {
	case !c.Transparent && c.Upstream == "":
		return fmt.Errorf("upstream.address is empty: set the provider address, e.g. 127.0.0.1:20880")
	case c.UpstreamConns < 1 || c.UpstreamConns > 64:
		return fmt.Errorf("upstream.connections: %d is out of range; must be between 1 and 64", c.UpstreamConns)
	case c.UpstreamJitter < 0 || c.UpstreamJitter > 1:
		return fmt.Errorf("keepalive.upstream_jitter: %v is out of range; must be between 0 and 1", c.UpstreamJitter)
	case c.MaxFrameBytes < 32:
		return fmt.Errorf("limits.max_frame_bytes: %d is too small", c.MaxFrameBytes)
	case c.Transparent && len(c.InboundPorts) == 0:
		return fmt.Errorf("listener.inbound_ports is empty: transparent mode forwards only to listed ports")
	}
	return nil
}

func (c *Config) portAllowed(p uint16) bool {
	for _, q := range c.InboundPorts {
		if q == p {
			return true
		}
	}
	return false
}
