package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Type URLs on the wire. Settings travel as the typed_config of a
// TypedExtensionConfig (an ECDS resource), which any go-control-plane
// snapshot cache serves unchanged.
const (
	ExtensionConfigType = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
	SettingsType        = "type.googleapis.com/stormgate.v1.Settings"
	discoveryResource   = "type.googleapis.com/envoy.service.discovery.v3.Resource"

	// DefaultResourceName is the TypedExtensionConfig name the client asks for
	// and the reference control plane serves.
	DefaultResourceName = "stormgate"
)

// ClientConfig configures the ADS client. Zero values pick the documented
// defaults.
type ClientConfig struct {
	// Addresses are control plane host:port addresses (at least one).
	// Replicas serving the same files are interchangeable: the client keeps
	// one stream, to one address at a time, and moves to the next address
	// when that stream ends or cannot be opened. It starts at an address
	// picked by a hash of the node id, so a fleet spreads over the replicas,
	// and stays where it is connected (no move back).
	Addresses []string
	// Node is what the client reports (node.id, node.cluster and the
	// metadata selectors match on). Node.ID is required (see NodeID);
	// Node.Ports is normally ProviderPorts of the startup settings.
	Node         NodeInfo
	ResourceName string // TypedExtensionConfig name; "" = DefaultResourceName
	// TLS: all empty = plaintext; CA alone = TLS verifying the server with CA
	// (instead of the system roots when only Cert/Key are set); Cert+Key add
	// a client certificate (mTLS). Paths to PEM files.
	CA, Cert, Key string
	ServerName    string // TLS server name override; "" = host of each address
	// Reconnect backoff: exponential with full jitter. 0 = 250ms and 10s.
	// After a stream that worked ends, the next address is tried within
	// BackoffBase; the delay grows with each full round of addresses that
	// all failed.
	BackoffBase, BackoffMax time.Duration
	// ConnectTimeout bounds each attempt to reach an address (an address
	// that drops SYNs); 0 = 5s.
	ConnectTimeout time.Duration
	// FirstResponseTimeout bounds the wait for the first response on a new
	// stream: a control plane that accepts the stream but never answers
	// (wedged, or without settings for this node) is left for the next
	// address. 0 = 15s.
	FirstResponseTimeout time.Duration
	// UserAgentVersion is sent as node.user_agent_version; optional.
	UserAgentVersion string
	// OnResult, if set, is told after each response where the client stands
	// (see Client.report): nack nil when it runs the version served, else why
	// it rejected it. Called on Run's goroutine.
	OnResult func(version string, nack error)
	// OnStatus, if set, is called on Run's goroutine with the new status
	// each time it changes. It must not block.
	OnStatus func(Status)
}

// NodeID picks the xDS node id: flag if set, else POD_NAME.POD_NAMESPACE
// from getenv (os.Getenv in production).
func NodeID(flag string, getenv func(string) string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	name, ns := getenv("POD_NAME"), getenv("POD_NAMESPACE")
	if name == "" || ns == "" {
		return "", errors.New("no xDS node id: pass --node-id or set POD_NAME and POD_NAMESPACE")
	}
	return name + "." + ns, nil
}

// Status is the client's view of its control plane.
type Status struct {
	Connected   bool      // a stream is up (it has had its first response)
	Server      string    // the address connected to, or being tried
	Since       time.Time // when Connected last changed (the start, at first)
	Version     string    // settings version running from the control plane ("" = none yet)
	Rejected    string    // a version NACKed and not followed by an ACK ("" = none)
	RejectError string    // why Rejected was refused
	LastError   string    // why the last stream ended or could not open
	Failovers   int       // times a stream came up on another address than the previous one
}

// String describes the status in one line, for /readyz.
func (s Status) String() string {
	var b strings.Builder
	switch {
	case s.Connected:
		fmt.Fprintf(&b, "xds: connected to %s since %s", s.Server, s.Since.UTC().Format(time.RFC3339))
	case s.Version == "":
		fmt.Fprintf(&b, "xds: not connected yet (since %s), trying %s", s.Since.UTC().Format(time.RFC3339), s.Server)
	default:
		fmt.Fprintf(&b, "xds: disconnected since %s (%s), trying %s", s.Since.UTC().Format(time.RFC3339),
			time.Since(s.Since).Round(time.Second), s.Server)
	}
	if !s.Connected && s.LastError != "" {
		fmt.Fprintf(&b, "; last error: %s", s.LastError)
	}
	if s.Version == "" {
		b.WriteString("; running the startup settings")
	} else {
		fmt.Fprintf(&b, "; running settings version %s", s.Version)
		if !s.Connected {
			b.WriteString(" (last good, unchanged while disconnected)")
		}
	}
	if s.Rejected != "" {
		fmt.Fprintf(&b, "; rejected version %s: %s", s.Rejected, s.RejectError)
	}
	return b.String()
}

// Client is an ADS (state of the world) client for one Settings resource.
// Create it with NewClient and call Run once.
type Client struct {
	cfg       ClientConfig
	log       *zap.Logger
	tls       *tls.Config // nil: plaintext
	updates   *prometheus.CounterVec
	connected prometheus.Gauge
	server    *prometheus.GaugeVec
	failovers prometheus.Counter
	first     int // index of the first address tried

	mu     sync.Mutex
	status Status

	// Owned by the Run goroutine.
	acked       string // last version ACKed ("" before the first)
	ackedHash   [32]byte
	rejected    string // version NACKed on the current stream
	rejectedSum [32]byte
	lastUp      string // address of the last stream that came up
}

// NewClient checks cfg, loads the TLS files and registers on reg (nil: no
// metrics) stormgate_xds_updates_total{result="ack|nack"},
// stormgate_xds_connected, stormgate_xds_control_plane{address},
// and stormgate_xds_failovers_total (stormgate_xds_rejecting is the Store's, fed by
// OnResult). log may be nil.
func NewClient(cfg ClientConfig, log *zap.Logger, reg prometheus.Registerer) (*Client, error) {
	if len(cfg.Addresses) == 0 {
		return nil, errors.New("xds client: no control plane address")
	}
	for _, a := range cfg.Addresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("xds client: control plane address %q: want host:port", a)
		}
	}
	if cfg.Node.ID == "" {
		return nil, errors.New("xds client: no node id")
	}
	if cfg.ResourceName == "" {
		cfg.ResourceName = DefaultResourceName
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 250 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 10 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.FirstResponseTimeout <= 0 {
		cfg.FirstResponseTimeout = 15 * time.Second
	}
	cfg.BackoffMax = max(cfg.BackoffMax, cfg.BackoffBase)
	cfg.Node.Ports = sortedPorts(slices.Clone(cfg.Node.Ports))
	if log == nil {
		log = zap.NewNop()
	}
	tlsConf, err := clientTLSConfig(cfg)
	if err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(cfg.Node.ID))
	c := &Client{
		cfg: cfg,
		log: log.With(zap.String("node_id", cfg.Node.ID)),
		tls: tlsConf,
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stormgate_xds_updates_total",
			Help: "Settings pushes received from the control plane, by result (ack: applied; nack: rejected).",
		}, []string{"result"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_xds_connected",
			Help: "1 while an ADS stream to the control plane is up (set at its first response), else 0.",
		}),
		server: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stormgate_xds_control_plane",
			Help: "1 for the control plane address the ADS stream is up on, 0 for the other configured addresses.",
		}, []string{"address"}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_xds_failovers_total",
			Help: "Times the ADS stream came up on another control plane address than the previous one.",
		}),
		first:  int(h.Sum32() % uint32(len(cfg.Addresses))),
		status: Status{Since: time.Now()},
	}
	c.status.Server = cfg.Addresses[c.first]
	c.updates.WithLabelValues("ack")
	c.updates.WithLabelValues("nack")
	for _, a := range cfg.Addresses {
		c.server.WithLabelValues(a)
	}
	if reg != nil {
		for _, col := range []prometheus.Collector{c.updates, c.connected, c.server, c.failovers} {
			if err := reg.Register(col); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// Status returns the current status. Safe for concurrent use.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// setStatus changes the status and tells OnStatus.
func (c *Client) setStatus(change func(*Status)) {
	c.mu.Lock()
	change(&c.status)
	s := c.status
	c.mu.Unlock()
	if c.cfg.OnStatus != nil {
		c.cfg.OnStatus(s)
	}
}

// clientTLSConfig is the TLS configuration for cfg's files (nil: plaintext).
func clientTLSConfig(cfg ClientConfig) (*tls.Config, error) {
	if cfg.CA == "" && cfg.Cert == "" && cfg.Key == "" {
		return nil, nil
	}
	ct, err := newClientTLS(cfg.CA, cfg.Cert, cfg.Key, 10*time.Second)
	if err != nil {
		return nil, err
	}
	return ct.config(cfg.ServerName), nil
}

// ApplyFunc makes pushed settings active, or says why it cannot. pushed is
// what the control plane sent: partial settings (only the fields its file
// sets), to be merged over the sidecar's startup settings, checked (once:
// settings.Store.Update) and applied by every stage. An error NACKs the push
// with its text as error_detail: make it name each field and why.
type ApplyFunc func(pushed *sg.Settings, version string) error

// Run keeps an ADS stream to a control plane until ctx is cancelled, then
// returns ctx.Err(). Each pushed Settings is decoded and handed to apply; the
// push is ACKed when apply succeeds, else NACKed with error_detail carrying
// apply's error (the problems, each naming its field) and the running
// settings stay. Each bad version is NACKed once per stream: the snapshot cache re-sends
// a NACKed version at once (go-control-plane#962), and the client answers that
// re-send with a request for the rejected version without error_detail, which
// parks the cache's watch until the version changes instead of looping.
// While no control plane is reachable the last applied settings stay. When a
// stream ends, Run tries the next address after a jittered pause of at most
// BackoffBase, then backs off exponentially (full jitter) for each full
// round of addresses that all failed. apply runs on Run's goroutine, one
// call at a time.
func (c *Client) Run(ctx context.Context, apply ApplyFunc) error {
	n := len(c.cfg.Addresses)
	idx := c.first
	failed := 0 // consecutive attempts that got no response
	var downSince, lastLog time.Time
	for {
		addr := c.cfg.Addresses[idx]
		c.setStatus(func(s *Status) { s.Server = addr })
		got, err := c.stream(ctx, addr, apply)
		if got {
			c.connected.Set(0)
			c.server.WithLabelValues(addr).Set(0)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if got {
			failed = 0
		} else {
			failed++
		}
		idx = (idx + 1) % n
		wait := fullJitter(c.cfg.BackoffBase, c.cfg.BackoffMax, failed/n)
		// The truth at once, then without flooding (as the provider's dial log): a
		// stream that ended and the first failed attempt after it are logged when they
		// happen; further failures every clientLogEvery with their count.
		now := time.Now()
		fields := []zap.Field{zap.String("xds_server", addr), zap.Error(err), zap.String("next", c.cfg.Addresses[idx]),
			zap.Duration("backoff", wait), zap.String("version", c.acked)}
		switch {
		case got:
			downSince, lastLog = now, now
			c.log.Warn("xds stream ended; keeping the last settings and reconnecting", fields...)
		case failed == 1:
			if downSince.IsZero() {
				downSince = now
			}
			lastLog = now
			c.log.Warn("xds control plane unreachable; keeping the last settings and retrying", fields...)
		case now.Sub(lastLog) >= clientLogEvery:
			lastLog = now
			c.log.Warn("xds control plane still unreachable; keeping the last settings and retrying",
				append(fields, zap.Int("failed_attempts", failed), zap.Duration("down_for", now.Sub(downSince).Round(time.Millisecond)))...)
		}
		c.setStatus(func(s *Status) {
			if s.Connected {
				s.Connected, s.Since = false, time.Now()
			}
			s.LastError = errText(err)
			s.Server = c.cfg.Addresses[idx]
		})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// clientLogEvery is how often Run logs a control plane that stays unreachable.
const clientLogEvery = 10 * time.Second

func errText(err error) string {
	if err == nil {
		return "stream ended"
	}
	return err.Error() // a *grpcError reads "Code: message"
}

// fullJitter returns a random delay in [0, min(max, base*2^attempt)].
func fullJitter(base, maxDelay time.Duration, attempt int) time.Duration {
	d := maxDelay
	if attempt < 30 {
		d = min(maxDelay, base<<attempt)
	}
	return rand.N(d + 1)
}

// stream runs one ADS stream to addr until it fails; got reports whether
// any response arrived on it.
func (c *Client) stream(ctx context.Context, addr string, apply ApplyFunc) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.rejected = ""
	node := c.cfg.Node.node()
	node.UserAgentVersion = c.cfg.UserAgentVersion
	first := &adsRequest{
		Node:          node,
		TypeURL:       ExtensionConfigType,
		ResourceNames: []string{c.cfg.ResourceName},
		VersionInfo:   c.acked, // what we run, so an unchanged server need not resend
	}
	// The call returns once the first response's headers arrive: the first
	// response timeout applies from here.
	silent := time.AfterFunc(c.cfg.FirstResponseTimeout, cancel)
	defer silent.Stop()
	st, err := openADS(sctx, addr, c.tls, c.cfg.ConnectTimeout, first)
	if err != nil {
		if ctx.Err() == nil && sctx.Err() != nil {
			err = fmt.Errorf("no response within %v of opening the stream", c.cfg.FirstResponseTimeout)
		}
		return false, err
	}
	defer st.Close()
	for {
		resp, err := st.Recv()
		if err != nil {
			if !got && ctx.Err() == nil && sctx.Err() != nil {
				err = fmt.Errorf("no response within %v of opening the stream", c.cfg.FirstResponseTimeout)
			}
			return got, err
		}
		if !got {
			if !silent.Stop() {
				continue // the timer fired just now: the stream is being cancelled
			}
			got = true
			c.connected.Set(1)
			c.server.WithLabelValues(addr).Set(1)
			moved := c.lastUp != "" && c.lastUp != addr
			if moved {
				c.failovers.Inc()
			}
			c.lastUp = addr
			c.log.Info("xds stream up", zap.String("xds_server", addr), zap.Bool("failover", moved))
			c.setStatus(func(s *Status) {
				s.Connected, s.Since, s.Server, s.LastError = true, time.Now(), addr, ""
				if moved {
					s.Failovers++
				}
			})
		}
		req := c.handle(resp, apply)
		if req == nil {
			continue
		}
		if err := st.Send(req); err != nil {
			return got, err
		}
	}
}

// handle turns one response into the request that answers it (nil: none).
func (c *Client) handle(resp *adsResponse, apply ApplyFunc) (req *adsRequest) {
	defer func() { c.report(resp, req) }()
	if resp.TypeURL != ExtensionConfigType {
		c.log.Warn("xds: ignoring a response of a type not subscribed to", zap.String("type_url", resp.TypeURL))
		return nil
	}
	version, nonce := resp.VersionInfo, resp.Nonce
	ack := func() *adsRequest {
		return &adsRequest{TypeURL: ExtensionConfigType, ResourceNames: []string{c.cfg.ResourceName},
			VersionInfo: version, ResponseNonce: nonce}
	}
	sum := contentSum(resp)
	switch {
	case version == c.rejected && sum == c.rejectedSum:
		// The snapshot cache re-sent what we just NACKed (#962). Asking for
		// this version parks the server's watch until the version changes;
		// a second NACK would make it re-send again, forever.
		c.log.Debug("xds: re-send of a rejected version; not NACKing again", zap.String("version", version))
		return ack()
	case version == c.acked && sum == c.ackedHash:
		return ack() // unchanged (e.g. the first response after a reconnect)
	}
	raw, err := c.find(resp)
	if err != nil {
		return c.nack(version, nonce, sum, err)
	}
	if raw == nil {
		// ECDS is not a full-state type: a response without our resource
		// leaves the running settings as they are.
		c.log.Debug("xds: response without our resource", zap.String("version", version))
		c.acked, c.ackedHash = version, sum
		c.setStatus(func(s *Status) { s.Version, s.Rejected, s.RejectError = version, "", "" })
		return ack()
	}
	pushed := &sg.Settings{}
	if err := proto.Unmarshal(raw.Value, pushed); err != nil {
		return c.nack(version, nonce, sum, fmt.Errorf("typed_config: cannot decode stormgate.v1.Settings: %w", err))
	}
	if len(pushed.ProtoReflect().GetUnknown()) > 0 {
		c.log.Warn("xds: pushed settings carry fields this sidecar does not know (newer schema?); ignoring them",
			zap.String("version", version))
	}
	if err := apply(pushed, version); err != nil {
		return c.nack(version, nonce, sum, err)
	}
	c.acked, c.ackedHash = version, sum
	c.updates.WithLabelValues("ack").Inc()
	c.setStatus(func(s *Status) { s.Version, s.Rejected, s.RejectError = version, "", "" })
	c.log.Info("xds: settings applied", zap.String("version", version))
	return ack()
}

// contentSum hashes a response's resources, so a re-sent version is told
// apart from a new one that reuses the version string.
func contentSum(resp *adsResponse) [32]byte {
	h := sha256.New()
	for _, r := range resp.Resources {
		h.Write([]byte(r.TypeURL))
		h.Write([]byte{0})
		h.Write(r.Value)
		h.Write([]byte{0})
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// find returns the typed_config of our TypedExtensionConfig, nil if the
// response does not carry it.
func (c *Client) find(resp *adsResponse) (*anyMsg, error) {
	for _, res := range resp.Resources {
		if res.TypeURL == discoveryResource { // a TTL'd resource wrapper
			inner, ok, err := unmarshalWrapped(res.Value)
			if err != nil {
				return nil, fmt.Errorf("resource wrapper: %w", err)
			}
			if !ok {
				continue // TTL heartbeat without a body
			}
			res = inner
		}
		if res.TypeURL != ExtensionConfigType {
			return nil, fmt.Errorf("resource of type %s in a %s response", res.TypeURL, ExtensionConfigType)
		}
		name, tc, _, err := unmarshalTypedExtensionConfig(res.Value)
		if err != nil {
			return nil, fmt.Errorf("TypedExtensionConfig: %w", err)
		}
		if name != c.cfg.ResourceName {
			continue
		}
		if tc.TypeURL != SettingsType {
			return nil, fmt.Errorf("typed_config: type %q, want %s", tc.TypeURL, SettingsType)
		}
		return &tc, nil
	}
	return nil, nil
}

func (c *Client) nack(version, nonce string, sum [32]byte, err error) *adsRequest {
	c.rejected, c.rejectedSum = version, sum
	c.updates.WithLabelValues("nack").Inc()
	c.setStatus(func(s *Status) { s.Rejected, s.RejectError = version, err.Error() })
	c.log.Warn("xds: settings rejected; keeping the running settings",
		zap.String("version", version), zap.String("running_version", c.acked), zap.Error(err))
	return &adsRequest{
		TypeURL:       ExtensionConfigType,
		ResourceNames: []string{c.cfg.ResourceName},
		VersionInfo:   c.acked, // the version we still run
		ResponseNonce: nonce,
		ErrorDetail:   &rpcStatus{Code: codeInvalidArgument, Message: err.Error()},
	}
}
