package admission

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// Fallbacks for a zero Config, so that it is usable in tests and tools. They are not
// Stormgate's defaults: those live in settings.Defaults, and the settings schema never
// sends zero for these fields.
const (
	zeroBacklog    = 65535
	zeroMaxPending = 10000
)

// Config is the admission stage's settings. It is a value: Update takes a new one whole.
//
// The zero value is usable: every field documents what zero (and negative) mean. The
// values Stormgate ships with are settings.AdmissionConfig(settings.Defaults()).
type Config struct {
	// Address is "IP:port" to listen on. An empty host means 0.0.0.0; port 0 picks a free port.
	// Cannot change live.
	Address string
	// Backlog is the listen(2) backlog; the kernel caps it at net.core.somaxconn.
	// <= 0 means 65535. Live: listen(2) is called again on the same socket.
	Backlog int
	// AcceptRate is the token bucket rate, admissions per second. <= 0 means unlimited.
	// When more connections are pending than AcceptRate admits within MaxWait, admission
	// speeds up just enough to admit each by its MaxWait (deadline pacing), evenly.
	AcceptRate float64
	// AcceptBurst is the token bucket size. <= 0 means 1 (strict pacing).
	AcceptBurst int
	// MaxWait bounds how long an accepted connection waits for a token: past it, the connection
	// is admitted regardless. <= 0 means no wait: a connection without a token is admitted at once.
	MaxWait time.Duration
	// MaxConnections caps admitted plus pending connections; a connection accepted over it is
	// closed at once (reason "max_connections"). <= 0 means no cap.
	MaxConnections int
	// MaxPending caps accepted connections waiting for admission; over it, a newly accepted
	// connection is closed at once (reason "max_pending"). <= 0 means 10,000.
	MaxPending int
	// PerSourceFairness admits pending connections round-robin across source IPs, instead of
	// in accept order, so that one host reconnecting many connections cannot starve the others.
	PerSourceFairness bool
	// TCPNoDelay sets TCP_NODELAY on accepted connections (set on the listener, inherited).
	TCPNoDelay bool
	// TCPQuickAck sets TCP_QUICKACK on each connection at admission.
	TCPQuickAck bool
	// TCPFastOpen is the listener's TCP_FASTOPEN queue length; 0 means off.
	// The kernel also needs net.ipv4.tcp_fastopen bit 2 (server) set.
	TCPFastOpen int
	// KeepAliveIdle turns on SO_KEEPALIVE with this TCP_KEEPIDLE on accepted connections
	// (set on the listener, inherited). 0 means off. Rounded up to whole seconds.
	KeepAliveIdle time.Duration
	// Transparent fills Conn.OrigDst from SO_ORIGINAL_DST (iptables REDIRECT). Cannot change live.
	Transparent bool
	// InboundPorts is, in transparent mode, the allow-list of original destination ports: a
	// connection redirected from another port is closed at once (reason "port_not_allowed").
	// Empty means every port is allowed. Ignored unless Transparent.
	InboundPorts []uint16
}

// settings is a Config with zero values resolved and the address parsed; immutable once built.
type settings struct {
	cfg            Config
	addr           netip.AddrPort
	backlog        int
	unlimited      bool
	burst          int
	maxWait        time.Duration
	maxConnections int // 0 = no cap
	maxPending     int
	keepIdleSecs   int // 0 = keepalive off
	inboundPorts   []uint16
}

func parseAddress(s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("admission: Address %q: %w", s, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("admission: Address %q: bad port", s)
	}
	ip := netip.IPv4Unspecified()
	if host != "" {
		ip, err = netip.ParseAddr(host)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("admission: Address %q: host must be an IP literal", s)
		}
		if ip.Zone() != "" {
			return netip.AddrPort{}, fmt.Errorf("admission: Address %q: zones are not supported", s)
		}
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
}

func newSettings(c Config) (*settings, error) {
	if c.Address == "" {
		c.Address = ":0"
	}
	addr, err := parseAddress(c.Address)
	if err != nil {
		return nil, err
	}
	if math.IsNaN(c.AcceptRate) {
		return nil, errors.New("admission: AcceptRate is NaN")
	}
	if c.TCPFastOpen < 0 {
		return nil, fmt.Errorf("admission: TCPFastOpen %d is negative", c.TCPFastOpen)
	}
	if c.KeepAliveIdle < 0 {
		return nil, fmt.Errorf("admission: KeepAliveIdle %v is negative", c.KeepAliveIdle)
	}
	s := &settings{cfg: c, addr: addr}
	s.cfg.InboundPorts = slices.Clone(c.InboundPorts)
	s.inboundPorts = s.cfg.InboundPorts
	s.backlog = c.Backlog
	if s.backlog <= 0 {
		s.backlog = zeroBacklog
	}
	if s.backlog > math.MaxInt32 {
		s.backlog = math.MaxInt32
	}
	s.unlimited = c.AcceptRate <= 0 || math.IsInf(c.AcceptRate, 1)
	s.burst = max(c.AcceptBurst, 1)
	s.maxWait = max(c.MaxWait, 0)
	s.maxConnections = max(c.MaxConnections, 0)
	s.maxPending = c.MaxPending
	if s.maxPending <= 0 {
		s.maxPending = zeroMaxPending
	}
	if c.KeepAliveIdle > 0 {
		s.keepIdleSecs = int((c.KeepAliveIdle + time.Second - 1) / time.Second)
	}
	return s, nil
}

// portAllowed reports whether a transparent connection to original port p may proceed.
func (s *settings) portAllowed(p uint16) bool {
	return len(s.inboundPorts) == 0 || slices.Contains(s.inboundPorts, p)
}

// fdHeadroom is the fds beyond connections that a sidecar needs (upstream pool, metrics,
// admin, xDS, logs); it only feeds the RLIMIT_NOFILE warning.
const fdHeadroom = 1024

// fdsNeeded is the RLIMIT_NOFILE these settings need at their caps (MaxConnections counts
// pending connections too).
func (s *settings) fdsNeeded() uint64 {
	if s.maxConnections == 0 {
		return 0 // no cap: nothing to compare against
	}
	return uint64(s.maxConnections) + fdHeadroom
}
