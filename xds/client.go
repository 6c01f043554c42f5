package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"

	sg "github.com/stormgate/stormgate/xds/stormgatev1"
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
	Address      string // control plane host:port (required)
	NodeID       string // node.id sent to the control plane (required; see NodeID)
	Cluster      string // node.cluster; optional
	ResourceName string // TypedExtensionConfig name; "" = DefaultResourceName
	// TLS: all empty = plaintext; CA alone = TLS verifying the server with CA
	// (instead of the system roots when only Cert/Key are set); Cert+Key add
	// a client certificate (mTLS). Paths to PEM files.
	CA, Cert, Key string
	ServerName    string // TLS server name override; "" = host of Address
	// Reconnect backoff: exponential with full jitter. 0 = 250ms and 10s.
	BackoffBase, BackoffMax time.Duration
	// Base is what a pushed Settings is merged over (unset pushed fields keep
	// Base's value); normally the file-or-default settings the sidecar started
	// with. nil = Defaults().
	Base *sg.Settings
	// Current returns the running settings, which a push is checked against
	// with CheckLive. nil = the last settings this client applied (Base at
	// first).
	Current func() *sg.Settings
	// UserAgentVersion is sent as node.user_agent_version; optional.
	UserAgentVersion string
	// OnResult, if set, is told after each response where the client stands
	// (see Client.report): nack nil when it runs the version served, else why
	// it rejected it. Called on Run's goroutine.
	OnResult func(version string, nack error)
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

// Client is an ADS (state of the world) client for one Settings resource.
// Create it with NewClient and call Run once.
type Client struct {
	cfg       ClientConfig
	log       *zap.Logger
	creds     credentials.TransportCredentials
	updates   *prometheus.CounterVec
	connected prometheus.Gauge

	// Owned by the Run goroutine.
	applied     *sg.Settings // last settings applied (Base at first)
	acked       string       // last version ACKed ("" before the first)
	ackedHash   [32]byte
	rejected    string // version NACKed on the current stream
	rejectedSum [32]byte
}

// NewClient checks cfg, loads the TLS files and registers
// stormgate_xds_updates_total{result="ack|nack"} and stormgate_xds_connected
// on reg (nil: no metrics). log may be nil.
func NewClient(cfg ClientConfig, log *zap.Logger, reg prometheus.Registerer) (*Client, error) {
	if cfg.Address == "" {
		return nil, errors.New("xds client: no control plane address")
	}
	if cfg.NodeID == "" {
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
	cfg.BackoffMax = max(cfg.BackoffMax, cfg.BackoffBase)
	if cfg.Base == nil {
		cfg.Base = Defaults()
	}
	if log == nil {
		log = zap.NewNop()
	}
	creds, err := clientCredentials(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:   cfg,
		log:   log.With(zap.String("xds_server", cfg.Address), zap.String("node_id", cfg.NodeID)),
		creds: creds,
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stormgate_xds_updates_total",
			Help: "Settings pushes received from the control plane, by result (ack: applied; nack: rejected).",
		}, []string{"result"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stormgate_xds_connected",
			Help: "1 while an ADS stream to the control plane is up (set at its first response), else 0.",
		}),
		applied: cfg.Base,
	}
	c.updates.WithLabelValues("ack")
	c.updates.WithLabelValues("nack")
	if reg != nil {
		for _, col := range []prometheus.Collector{c.updates, c.connected} {
			if err := reg.Register(col); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

func clientCredentials(cfg ClientConfig) (credentials.TransportCredentials, error) {
	if cfg.CA == "" && cfg.Cert == "" && cfg.Key == "" {
		return insecure.NewCredentials(), nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName}
	if cfg.CA != "" {
		pem, err := os.ReadFile(cfg.CA)
		if err != nil {
			return nil, fmt.Errorf("xds client: CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xds client: CA %s: no PEM certificates", cfg.CA)
		}
		tc.RootCAs = pool
	}
	if (cfg.Cert == "") != (cfg.Key == "") {
		return nil, errors.New("xds client: a client certificate needs both cert and key")
	}
	if cfg.Cert != "" {
		kp, err := tls.LoadX509KeyPair(cfg.Cert, cfg.Key)
		if err != nil {
			return nil, fmt.Errorf("xds client: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return credentials.NewTLS(tc), nil
}

// ApplyFunc makes validated settings active (e.g. Store.Update with source
// "xds"). An error NACKs the push: make it name the field and why.
type ApplyFunc func(s *sg.Settings, version string) error

// Run keeps an ADS stream to the control plane until ctx is cancelled, then
// returns ctx.Err(). Each pushed Settings is merged over cfg.Base, checked
// with Validate and CheckLive against the running settings, and handed to
// apply; the push is ACKed when all succeed, else NACKed with error_detail
// carrying the problems (each names its field) and the running settings
// stay. Each bad version is NACKed once per stream: the snapshot cache re-sends
// a NACKed version at once (go-control-plane#962), and the client answers that
// re-send with a request for the rejected version without error_detail, which
// parks the cache's watch until the version changes instead of looping.
// While the control plane is away the last applied settings stay; Run
// reconnects with exponential backoff and full jitter. apply runs on Run's
// goroutine, one call at a time.
func (c *Client) Run(ctx context.Context, apply ApplyFunc) error {
	conn, err := grpc.NewClient(c.cfg.Address,
		grpc.WithTransportCredentials(c.creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  c.cfg.BackoffBase,
				Multiplier: 2,
				Jitter:     0.2,
				MaxDelay:   c.cfg.BackoffMax,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Finds a control plane that vanished without a FIN. 5 min is the
		// most frequent ping grpc-go servers accept by default.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second}))
	if err != nil {
		return fmt.Errorf("xds client: %w", err)
	}
	defer conn.Close()
	ads := discovery.NewAggregatedDiscoveryServiceClient(conn)
	for attempt := 0; ; attempt++ {
		got, err := c.stream(ctx, ads, apply)
		c.connected.Set(0)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if got {
			attempt = 0 // the stream worked; start the backoff over
		}
		wait := fullJitter(c.cfg.BackoffBase, c.cfg.BackoffMax, attempt)
		c.log.Warn("xds stream ended; keeping the last settings and reconnecting",
			zap.Error(err), zap.Duration("backoff", wait), zap.String("version", c.acked))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// fullJitter returns a random delay in [0, min(max, base*2^attempt)].
func fullJitter(base, maxDelay time.Duration, attempt int) time.Duration {
	d := maxDelay
	if attempt < 30 {
		d = min(maxDelay, base<<attempt)
	}
	return rand.N(d + 1)
}

// stream runs one ADS stream until it fails; got reports whether any
// response arrived on it.
func (c *Client) stream(ctx context.Context, ads discovery.AggregatedDiscoveryServiceClient, apply ApplyFunc) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := ads.StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	c.rejected = ""
	node := &core.Node{Id: c.cfg.NodeID, Cluster: c.cfg.Cluster, UserAgentName: "stormgate"}
	if c.cfg.UserAgentVersion != "" {
		node.UserAgentVersionType = &core.Node_UserAgentVersion{UserAgentVersion: c.cfg.UserAgentVersion}
	}
	first := &discovery.DiscoveryRequest{
		Node:          node,
		TypeUrl:       ExtensionConfigType,
		ResourceNames: []string{c.cfg.ResourceName},
		VersionInfo:   c.acked, // what we run, so an unchanged server need not resend
	}
	if err := st.Send(first); err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		if !got {
			got = true
			c.connected.Set(1)
			c.log.Info("xds stream up")
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
func (c *Client) handle(resp *discovery.DiscoveryResponse, apply ApplyFunc) (req *discovery.DiscoveryRequest) {
	defer func() { c.report(resp, req) }()
	if resp.GetTypeUrl() != ExtensionConfigType {
		c.log.Warn("xds: ignoring a response of a type not subscribed to", zap.String("type_url", resp.GetTypeUrl()))
		return nil
	}
	version, nonce := resp.GetVersionInfo(), resp.GetNonce()
	ack := func() *discovery.DiscoveryRequest {
		return &discovery.DiscoveryRequest{TypeUrl: ExtensionConfigType, ResourceNames: []string{c.cfg.ResourceName},
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
		return ack()
	}
	pushed := &sg.Settings{}
	if err := raw.UnmarshalTo(pushed); err != nil {
		return c.nack(version, nonce, sum, fmt.Errorf("typed_config: cannot decode stormgate.v1.Settings: %w", err))
	}
	if len(pushed.ProtoReflect().GetUnknown()) > 0 {
		c.log.Warn("xds: pushed settings carry fields this sidecar does not know (newer schema?); ignoring them",
			zap.String("version", version))
	}
	next := Merge(c.cfg.Base, pushed)
	if err := Validate(next); err != nil {
		return c.nack(version, nonce, sum, err)
	}
	cur := c.applied
	if c.cfg.Current != nil {
		cur = c.cfg.Current()
	}
	if err := CheckLive(cur, next); err != nil {
		return c.nack(version, nonce, sum, err)
	}
	if err := apply(next, version); err != nil {
		return c.nack(version, nonce, sum, err)
	}
	c.applied, c.acked, c.ackedHash = next, version, sum
	c.updates.WithLabelValues("ack").Inc()
	c.log.Info("xds: settings applied", zap.String("version", version))
	return ack()
}

// contentSum hashes a response's resources, so a re-sent version is told
// apart from a new one that reuses the version string.
func contentSum(resp *discovery.DiscoveryResponse) [32]byte {
	h := sha256.New()
	for _, r := range resp.GetResources() {
		h.Write([]byte(r.GetTypeUrl()))
		h.Write([]byte{0})
		h.Write(r.GetValue())
		h.Write([]byte{0})
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// find returns the typed_config of our TypedExtensionConfig, nil if the
// response does not carry it.
func (c *Client) find(resp *discovery.DiscoveryResponse) (*anypb.Any, error) {
	for _, res := range resp.GetResources() {
		if res.GetTypeUrl() == discoveryResource { // a TTL'd resource wrapper
			w := &discovery.Resource{}
			if err := res.UnmarshalTo(w); err != nil {
				return nil, fmt.Errorf("resource wrapper: %w", err)
			}
			if w.GetResource() == nil {
				continue // TTL heartbeat without a body
			}
			res = w.GetResource()
		}
		if res.GetTypeUrl() != ExtensionConfigType {
			return nil, fmt.Errorf("resource of type %s in a %s response", res.GetTypeUrl(), ExtensionConfigType)
		}
		tec := &core.TypedExtensionConfig{}
		if err := res.UnmarshalTo(tec); err != nil {
			return nil, fmt.Errorf("TypedExtensionConfig: %w", err)
		}
		if tec.GetName() != c.cfg.ResourceName {
			continue
		}
		tc := tec.GetTypedConfig()
		if tc.GetTypeUrl() != SettingsType {
			return nil, fmt.Errorf("typed_config: type %q, want %s", tc.GetTypeUrl(), SettingsType)
		}
		return tc, nil
	}
	return nil, nil
}

func (c *Client) nack(version, nonce string, sum [32]byte, err error) *discovery.DiscoveryRequest {
	c.rejected, c.rejectedSum = version, sum
	c.updates.WithLabelValues("nack").Inc()
	c.log.Warn("xds: settings rejected; keeping the running settings",
		zap.String("version", version), zap.String("running_version", c.acked), zap.Error(err))
	return &discovery.DiscoveryRequest{
		TypeUrl:       ExtensionConfigType,
		ResourceNames: []string{c.cfg.ResourceName},
		VersionInfo:   c.acked, // the version we still run
		ResponseNonce: nonce,
		ErrorDetail:   &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()},
	}
}
