package controlplane

import (
	"context"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
)

// waitFor polls cond until it holds or the deadline passes.
var waitFor = testkit.WaitFor

// runningClient is an xds.Client as `sidecar run --xds` runs one: each push
// merged over the startup settings and made active in a settings.Store,
// which refuses what is invalid or cannot change live.
type runningClient struct {
	c    *xds.Client
	reg  *prometheus.Registry
	st   *settings.Store
	stop func() // ends Run and waits for it

	mu      sync.Mutex
	applied *sg.Settings
	ver     string
	calls   int
}

func startClient(t *testing.T, addr, node string, mod func(*xds.ClientConfig)) *runningClient {
	t.Helper()
	return startSidecar(t, addr, node, settings.Defaults(), mod)
}

// startSidecar is startClient for a sidecar that started with base.
func startSidecar(t *testing.T, addr, node string, base *sg.Settings, mod func(*xds.ClientConfig)) *runningClient {
	t.Helper()
	cfg := xds.ClientConfig{Addresses: []string{addr}, Node: xds.NodeInfo{ID: node},
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	rc := &runningClient{reg: prometheus.NewRegistry()}
	var err error
	if rc.st, err = settings.NewStore(base, "v0", settings.SourceFile, nil); err != nil {
		t.Fatal(err)
	}
	if rc.c, err = xds.NewClient(cfg, zaptest.NewLogger(t), rc.reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rc.c.Run(ctx, rc.apply) }()
	rc.stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(rc.stop)
	return rc
}

func (rc *runningClient) apply(pushed *sg.Settings, version string) error {
	next := settings.Merge(rc.st.Base().Settings, pushed)
	if err := rc.st.Update(next, version, settings.SourceXDS, nil); err != nil {
		return err
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.applied, rc.ver, rc.calls = next, version, rc.calls+1
	return nil
}

// get returns the settings applied last, their version and how many pushes were applied.
func (rc *runningClient) get() (*sg.Settings, string, int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.applied, rc.ver, rc.calls
}

func (rc *runningClient) version() string { _, v, _ := rc.get(); return v }

func (rc *runningClient) interval() time.Duration {
	s, _, _ := rc.get()
	return s.GetKeepalive().GetUpstreamInterval().AsDuration()
}

// connected is stormgate_xds_connected.
func (rc *runningClient) connected() float64 { return metric(rc.reg, "stormgate_xds_connected", "") }

// count is stormgate_xds_updates_total{result}.
func (rc *runningClient) count(result string) float64 {
	return metric(rc.reg, "stormgate_xds_updates_total", result)
}

// metric reads a gauge or counter from reg: the series whose one label has
// value label ("" for a series without labels).
func metric(reg *prometheus.Registry, name, label string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if (label == "" && len(m.GetLabel()) == 0) || (len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == label) {
				return value(m)
			}
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

func interval(d time.Duration) *sg.Settings {
	return &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: durationpb.New(d)}}
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// coreNode is the node a sidecar reporting n sends (the keys xds.NodeInfo's
// metadata uses; xds.TestNodeMetadata checks the client writes them).
func coreNode(n xds.NodeInfo) *core.Node {
	fields := map[string]*structpb.Value{}
	if n.Namespace != "" {
		fields[xds.MetaNamespace] = structpb.NewStringValue(n.Namespace)
	}
	if len(n.Labels) > 0 {
		ls := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for k, v := range n.Labels {
			ls.Fields[k] = structpb.NewStringValue(v)
		}
		fields[xds.MetaLabels] = structpb.NewStructValue(ls)
	}
	if len(n.Ports) > 0 {
		ps := &structpb.ListValue{}
		for _, p := range n.Ports {
			ps.Values = append(ps.Values, structpb.NewNumberValue(float64(p)))
		}
		fields[xds.MetaProviderPorts] = structpb.NewListValue(ps)
	}
	return &core.Node{Id: n.ID, Cluster: n.Cluster, Metadata: &structpb.Struct{Fields: fields}}
}
