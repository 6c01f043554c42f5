package xds

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// waitFor polls cond until it holds or the deadline passes.
var waitFor = testkit.WaitFor

// request is what a test control plane saw from the client.
type request struct {
	version, nonce, errorDetail string
	hasNode                     bool
}

// rawServer is a plain go-control-plane ADS server over a snapshot cache,
// as any operator's control plane would run it: it re-sends NACKed versions
// (go-control-plane#962).
type rawServer struct {
	addr  string
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	reqs  []request
	sent  []string // versions of the responses sent
	stop  func()
}

func startRawServer(t *testing.T, opts ...grpc.ServerOption) *rawServer {
	t.Helper()
	return startRawServerWith(t, cachev3.IDHash{}, opts...)
}

// anyNode keys every node to one snapshot: a control plane serving its default to all.
type anyNode struct{}

func (anyNode) ID(*core.Node) string { return "" }

// startReplica is a control plane that serves s as version to every node.
func startReplica(t *testing.T, version string, s *sg.Settings, opts ...grpc.ServerOption) *rawServer {
	t.Helper()
	rs := startRawServerWith(t, anyNode{}, opts...)
	rs.set(t, "", version, s)
	return rs
}

func startRawServerWith(t *testing.T, hash cachev3.NodeHash, opts ...grpc.ServerOption) *rawServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rs := &rawServer{addr: lis.Addr().String(), cache: cachev3.NewSnapshotCache(true, hash, nil)}
	xs := serverv3.NewServer(ctx, rs.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			rs.reqs = append(rs.reqs, request{r.GetVersionInfo(), r.GetResponseNonce(), r.GetErrorDetail().GetMessage(), r.Node != nil})
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, r *discovery.DiscoveryResponse) {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			rs.sent = append(rs.sent, r.GetVersionInfo())
		},
	})
	gs := grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	rs.stop = func() { cancel(); gs.Stop(); <-done }
	t.Cleanup(rs.stop)
	return rs
}

func (rs *rawServer) set(t *testing.T, node, version string, s *sg.Settings) {
	t.Helper()
	tc, err := anypb.New(s)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{
		resource.ExtensionConfigType: {&core.TypedExtensionConfig{Name: DefaultResourceName, TypedConfig: tc}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (rs *rawServer) requests() []request {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]request(nil), rs.reqs...)
}

func (rs *rawServer) sentCount(version string) (n int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, v := range rs.sent {
		if v == version {
			n++
		}
	}
	return n
}

func (rs *rawServer) nacks() (n int) {
	for _, r := range rs.requests() {
		if r.errorDetail != "" {
			n++
		}
	}
	return n
}

func (rs *rawServer) sawACK(version string) bool {
	for _, r := range rs.requests() {
		if r.version == version && r.nonce != "" && r.errorDetail == "" {
			return true
		}
	}
	return false
}

// applied does with a push what a sidecar does (cmd/sidecar's liveSettings, without the
// stages): merges it over the startup settings and makes it active in a settings.Store, which
// refuses what is invalid or cannot change live. It records what it applied.
type applied struct {
	st       *settings.Store
	mu       sync.Mutex
	settings *sg.Settings
	version  string
	calls    int
}

func newApplied(t *testing.T) *applied {
	st, err := settings.NewStore(settings.Defaults(), "v0", settings.SourceDefaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &applied{st: st}
}

func (a *applied) apply(pushed *sg.Settings, v string) error {
	next := settings.Merge(a.st.Base().Settings, pushed)
	if err := a.st.Update(next, v, settings.SourceXDS, nil); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.settings, a.version = next, v
	a.calls++
	return nil
}

func (a *applied) get() (*sg.Settings, string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settings, a.version, a.calls
}

type runningClient struct {
	c    *Client
	reg  *prometheus.Registry
	app  *applied
	stop func()
}

func startClient(t *testing.T, addr, node string, mod func(*ClientConfig)) *runningClient {
	t.Helper()
	cfg := ClientConfig{Addresses: []string{addr}, Node: NodeInfo{ID: node}, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	reg := prometheus.NewRegistry()
	c, err := NewClient(cfg, zaptest.NewLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	rc := &runningClient{c: c, reg: reg, app: newApplied(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, rc.app.apply) }()
	rc.stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	t.Cleanup(rc.stop)
	return rc
}

func (rc *runningClient) version() string { _, v, _ := rc.app.get(); return v }
func (rc *runningClient) interval() time.Duration {
	s, _, _ := rc.app.get()
	return s.GetKeepalive().GetUpstreamInterval().AsDuration()
}
func (rc *runningClient) connected() float64 {
	return testutil.ToFloat64(rc.c.connected)
}
func (rc *runningClient) count(result string) float64 {
	return testutil.ToFloat64(rc.c.updates.WithLabelValues(result))
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func interval(d time.Duration) *sg.Settings {
	return &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: dur(d)}}
}

func TestClientACK(t *testing.T) {
	rs := startRawServer(t)
	rs.set(t, "pod-a.ns", "v1", interval(5*time.Second))
	rc := startClient(t, rs.addr, "pod-a.ns", nil)

	waitFor(t, 5*time.Second, "v1 applied", func() bool { return rc.version() == "v1" })
	s, _, _ := rc.app.get()
	if got := s.GetKeepalive().GetUpstreamInterval().AsDuration(); got != 5*time.Second {
		t.Fatalf("applied interval %v", got)
	}
	if !proto.Equal(s.GetAdmission(), settings.Defaults().GetAdmission()) {
		t.Fatalf("unset pushed fields must keep the base value")
	}
	waitFor(t, 5*time.Second, "ACK of v1", func() bool { return rs.sawACK("v1") })
	if rc.count("ack") != 1 || rc.count("nack") != 0 || rc.connected() != 1 {
		t.Fatalf("metrics: ack=%v nack=%v connected=%v", rc.count("ack"), rc.count("nack"), rc.connected())
	}
	if first := rs.requests()[0]; !first.hasNode || first.version != "" {
		t.Fatalf("first request %+v: must carry the node and no version", first)
	}
}

// The snapshot cache re-sends a NACKed version at once (#962); the client
// must NACK it exactly once, keep the old settings, and still take the next
// good version.
func TestClientNACKOncePerBadVersion(t *testing.T) {
	rs := startRawServer(t)
	rs.set(t, "n", "v1", interval(5*time.Second))
	rc := startClient(t, rs.addr, "n", nil)
	waitFor(t, 5*time.Second, "v1 applied", func() bool { return rc.version() == "v1" })

	bad := []struct {
		version string
		s       *sg.Settings
		field   string
	}{
		{"v2-negative", interval(-time.Second), "keepalive.upstream_interval: -1s is negative; must be between 1s and 1h"},
		{"v3-address", &sg.Settings{Listener: &sg.Listener{Address: proto.String("0.0.0.0:20999")}},
			"listener.address: cannot change live (0.0.0.0:20881 -> 0.0.0.0:20999)"},
		// Both kinds in one push: one NACK lists both (it listed the bad value alone).
		{"v4-both", &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: dur(-time.Second)},
			Listener: &sg.Listener{Address: proto.String("0.0.0.0:20999")}},
			"keepalive.upstream_interval: -1s is negative; must be between 1s and 1h; listener.address: cannot change live (0.0.0.0:20881 -> 0.0.0.0:20999)"},
	}
	for i, b := range bad {
		rs.set(t, "n", b.version, b.s)
		// The parking request (the rejected version, no error_detail) comes
		// after the cache's re-send: once it is there, the exchange is over.
		waitFor(t, 5*time.Second, "re-send answered", func() bool { return rs.sawACK(b.version) })
		if n := rs.sentCount(b.version); n != 2 {
			t.Fatalf("%s sent %d times; this test needs the cache's re-send after the NACK (#962)", b.version, n)
		}
		if n := rs.nacks(); n != i+1 {
			t.Fatalf("%s: %d NACKs in total, want %d: %+v", b.version, n, i+1, rs.requests())
		}
		var nack request
		for _, r := range rs.requests() {
			if r.errorDetail != "" {
				nack = r
			}
		}
		if !strings.Contains(nack.errorDetail, b.field) || nack.version != "v1" {
			t.Fatalf("NACK %+v: want version v1 and error_detail containing %q", nack, b.field)
		}
		if s, v, calls := rc.app.get(); v != "v1" || calls != 1 || s.GetKeepalive().GetUpstreamInterval().AsDuration() != 5*time.Second {
			t.Fatalf("old settings must stay: version %s after %d applies", v, calls)
		}
	}
	rs.set(t, "n", "v5", interval(7*time.Second))
	waitFor(t, 5*time.Second, "v5 applied", func() bool { return rc.version() == "v5" })
	if n := rs.nacks(); n != 3 {
		t.Fatalf("%d NACKs, want 3 (one per bad version)", n)
	}
	if got := len(rs.requests()); got > 10 {
		t.Fatalf("%d requests for 5 versions: the client loops: %+v", got, rs.requests())
	}
	if rc.count("ack") != 2 || rc.count("nack") != 3 {
		t.Fatalf("metrics: ack=%v nack=%v", rc.count("ack"), rc.count("nack"))
	}
}

func TestClientApplyErrorNACKs(t *testing.T) {
	rs := startRawServer(t)
	rs.set(t, "n", "v1", interval(5*time.Second))
	cfg := ClientConfig{Addresses: []string{rs.addr}, Node: NodeInfo{ID: "n"}, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	c, err := NewClient(cfg, zaptest.NewLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(*sg.Settings, string) error {
			return settings.Problems{{Field: "upstream.connections", Message: "the pool cannot shrink below in-flight needs"}}
		})
	}()
	defer func() { cancel(); <-done }()
	waitFor(t, 5*time.Second, "NACK", func() bool { return rs.nacks() == 1 })
	for _, r := range rs.requests() {
		if r.errorDetail != "" && r.errorDetail != "upstream.connections: the pool cannot shrink below in-flight needs" {
			t.Fatalf("error_detail %q", r.errorDetail)
		}
	}
}

func TestNodeID(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if id, _ := NodeID("x", env(nil)); id != "x" {
		t.Errorf("flag wins: %q", id)
	}
	if id, _ := NodeID("", env(map[string]string{"POD_NAME": "p-0", "POD_NAMESPACE": "shop"})); id != "p-0.shop" {
		t.Errorf("env: %q", id)
	}
	if _, err := NodeID("", env(map[string]string{"POD_NAME": "p-0"})); err == nil || !strings.Contains(err.Error(), "--node-id") {
		t.Errorf("missing: %v", err)
	}
}

func TestFullJitter(t *testing.T) {
	for attempt := range 40 {
		limit := min(2*time.Second, (50*time.Millisecond)<<min(attempt, 30))
		for range 50 {
			if d := fullJitter(50*time.Millisecond, 2*time.Second, attempt); d < 0 || d > limit {
				t.Fatalf("attempt %d: %v outside [0,%v]", attempt, d, limit)
			}
		}
	}
}

// The client tells the store where it stands: a NACK sets rejecting, the
// cache's re-send of that version keeps it, the control plane going back to
// the running version clears it, and so does a good new version.
func TestClientResultsDriveRejecting(t *testing.T) {
	rs := startRawServer(t)
	rs.set(t, "n", "v1", interval(5*time.Second))
	st, err := settings.NewStore(settings.Defaults(), "v0", settings.SourceDefaults, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rc := startClient(t, rs.addr, "n", func(c *ClientConfig) { c.OnResult = st.XDSResult })
	waitFor(t, 5*time.Second, "v1 ACKed", func() bool { return rs.sawACK("v1") })
	if st.Rejecting() {
		t.Fatal("rejecting after an ACK")
	}
	rs.set(t, "n", "v2", interval(-time.Second))
	waitFor(t, 5*time.Second, "re-send of v2 answered", func() bool { return rs.sawACK("v2") })
	if !st.Rejecting() || st.LastRejected().Version != "v2" ||
		!strings.Contains(st.LastRejected().Error, "keepalive.upstream_interval") {
		t.Fatalf("after the NACK of v2 (and its re-send): rejecting=%v last=%+v", st.Rejecting(), st.LastRejected())
	}
	rs.set(t, "n", "v1", interval(5*time.Second))
	waitFor(t, 5*time.Second, "back on v1", func() bool { return !st.Rejecting() })
	rs.set(t, "n", "v3", interval(-2*time.Second))
	waitFor(t, 5*time.Second, "v3 rejected", func() bool { return st.Rejecting() && st.LastRejected().Version == "v3" })
	rs.set(t, "n", "v4", interval(6*time.Second))
	waitFor(t, 5*time.Second, "v4 applied", func() bool { return rc.version() == "v4" && !st.Rejecting() })
}
