package e2e

// Helpers for the settings-over-xDS acceptance tests (issue 5): the real
// `sidecar control-plane` and `sidecar run --xds` processes, /config_dump
// reads, atomic file edits, an in-process provider whose counters the test
// reads live, and an in-process go-control-plane server that publishes what
// the reference control plane would refuse (to prove the sidecar's NACKs).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/stormgate/stormgate/internal/promscrape"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
	"github.com/stormgate/stormgate/xds/controlplane"
	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
)

// xdsControlPlane is a `sidecar control-plane` process.
type xdsControlPlane struct {
	*proc
	addr    string // gRPC (ADS) address
	metrics string // /metrics address
	config  string // file or directory it serves
	http    *http.Client
}

// startXDSControlPlane runs `sidecar control-plane` serving config on listen
// ("" = 127.0.0.1:0), with extra flags (e.g. --cert), and waits until it serves.
func startXDSControlPlane(t *testing.T, listen, config string, extra ...string) *xdsControlPlane {
	t.Helper()
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	p := startProc(t, "control-plane", bins.sidecar, append([]string{"control-plane", "--listen", listen, "--config", config,
		"--metrics", "127.0.0.1:0", "--log-format", "json", "--log-level", "info"}, extra...)...)
	cp := &xdsControlPlane{proc: p, config: config, http: &http.Client{Timeout: 5 * time.Second}}
	m := p.waitJSONLine(t, false, 20*time.Second, `"control plane serving"`, func(m map[string]any) bool {
		return m["msg"] == "control plane serving"
	})
	cp.addr, _ = m["listen"].(string)
	m = p.waitJSONLine(t, false, 10*time.Second, `metrics "http listener started"`, func(m map[string]any) bool {
		return m["msg"] == "http listener started" && m["listener"] == "metrics"
	})
	cp.metrics, _ = m["address"].(string)
	if cp.addr == "" || cp.metrics == "" {
		t.Fatalf("control plane addresses not found in its log: listen=%q metrics=%q", cp.addr, cp.metrics)
	}
	return cp
}

// metric returns the control plane's metric summed over the matching series.
func (cp *xdsControlPlane) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	ms, err := promscrape.Get(context.Background(), cp.http, cp.metrics)
	if err != nil {
		t.Fatalf("control plane /metrics: %v", err)
	}
	return ms.Sum(name, labels...)
}

// logTime converts a zap JSON "ts" (ISO-8601, e.g. 2026-01-02T03:04:05.678Z)
// to a time.
func logTime(m map[string]any) time.Time {
	ts, _ := m["ts"].(string)
	t, _ := time.Parse(time.RFC3339Nano, ts)
	return t
}

// startXDSSidecar runs `sidecar run --xds cpAddr --node-id nodeID` in front of
// upstream with its listeners on ephemeral ports, and waits until it has its
// upstream connections (wantUpstream, 0 = do not wait). It does not wait for
// the first push: see waitXDSApplied.
func startXDSSidecar(t *testing.T, upstream, cpAddr, nodeID string, wantUpstream int, extra ...string) *sidecar {
	t.Helper()
	args := append([]string{"run", "--listen", "127.0.0.1:0", "--upstream", upstream,
		"--metrics", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "info",
		"--xds", cpAddr, "--node-id", nodeID}, extra...)
	return attachSidecar(t, startProc(t, "sidecar", bins.sidecar, args...), wantUpstream)
}

// configDump is the sidecar's /config_dump.
type configDump struct {
	Build    string         `json:"stormgate_version"` // the binary's version
	Version  string         `json:"version"`
	Source   string         `json:"source"`
	Applied  time.Time      `json:"applied"`
	Settings map[string]any `json:"settings"`
}

// field returns a leaf setting by dotted path as text ("1s", "50", "info"),
// or "<unset>".
func (d configDump) field(path string) string {
	var v any = d.Settings
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "<unset>"
		}
		v = m[k]
	}
	if v == nil {
		return "<unset>"
	}
	return fmt.Sprint(v)
}

func (s *sidecar) configDump() (configDump, error) {
	var d configDump
	resp, err := s.http.Get("http://" + s.admin + "/config_dump")
	if err != nil {
		return d, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return d, err
	}
	if resp.StatusCode != http.StatusOK {
		return d, fmt.Errorf("/config_dump: %s: %s", resp.Status, b)
	}
	return d, json.Unmarshal(b, &d)
}

func (s *sidecar) mustConfigDump(t *testing.T) configDump {
	t.Helper()
	d, err := s.configDump()
	if err != nil {
		t.Fatalf("config_dump: %v", err)
	}
	return d
}

// waitConfigDump polls /config_dump every few milliseconds until cond holds,
// and returns the dump and the time it was first seen.
func (s *sidecar) waitConfigDump(t *testing.T, d time.Duration, what string, cond func(configDump) bool) (configDump, time.Time) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last configDump
	var lastErr error
	for {
		cd, err := s.configDump()
		if err == nil {
			if cond(cd) {
				return cd, time.Now()
			}
			last = cd
		}
		lastErr = err
		if s.Exited() {
			t.Fatalf("sidecar exited (%v) while waiting for /config_dump to show %s", s.Err(), what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/config_dump did not show %s within %v: last version %q source %q, last error %v",
				what, d, last.Version, last.Source, lastErr)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitXDSApplied waits until the sidecar runs the settings of version from
// the control plane.
func (s *sidecar) waitXDSApplied(t *testing.T, d time.Duration, version string) configDump {
	t.Helper()
	cd, _ := s.waitConfigDump(t, d, "xds version "+version, func(cd configDump) bool {
		return cd.Source == settings.SourceXDS && cd.Version == version
	})
	return cd
}

// stays checks cond every few milliseconds for d and fails the test the first
// time it does not hold. The scenario prescribes the window (e.g. "a NACK is
// not repeated"): a broken client repeats within milliseconds.
func stays(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok, detail := cond(); !ok {
			t.Fatalf("%s stopped holding: %s", what, detail)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// writeFileAtomic replaces path the way editors and Kubernetes ConfigMap
// updates do (write a hidden temp file, rename over), so a reader never sees
// half a file.
func writeFileAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// cpVersion is the version the reference control plane serves to nodeID for
// a control-plane file's content (a content hash of what it serves).
func cpVersion(t *testing.T, content, nodeID string) string {
	t.Helper()
	f, err := cpfile.Parse([]byte(content))
	if err != nil {
		t.Fatalf("control-plane file invalid: %v\n%s", err, content)
	}
	return settings.Version(f.Overlay(nodeID))
}

// startXDSProvider runs a peer.Provider in the test process, so the test can
// read its counters live. Closed and waited for at cleanup.
func startXDSProvider(t *testing.T) *peer.Provider {
	t.Helper()
	p, err := peer.NewProvider(peer.ProviderConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		_ = p.Close()
		if err := <-done; err != nil && !errors.Is(err, peer.ErrProviderClosed) {
			t.Errorf("provider: %v", err)
		}
	})
	return p
}

// xdsFakeCP is a plain go-control-plane server + snapshot cache in the test
// process. Unlike the reference control plane it publishes whatever it is
// given, invalid settings included, and records every NACK it receives.
type xdsFakeCP struct {
	addr  string
	cache cachev3.SnapshotCache

	mu    sync.Mutex
	nacks []xdsNack
}

type xdsNack struct {
	node, runningVersion, detail string
}

func startXDSFakeCP(t *testing.T) *xdsFakeCP {
	t.Helper()
	f := &xdsFakeCP{cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, zap.NewNop().Sugar())}
	ctx, cancel := context.WithCancel(context.Background())
	srv := serverv3.NewServer(ctx, f.cache, serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
			if req.GetErrorDetail() != nil {
				f.mu.Lock()
				f.nacks = append(f.nacks, xdsNack{req.GetNode().GetId(), req.GetVersionInfo(), req.GetErrorDetail().GetMessage()})
				f.mu.Unlock()
			}
			return nil
		},
	})
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	f.addr = lis.Addr().String()
	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(lis) })
	t.Cleanup(func() {
		gs.Stop()
		cancel()
		wg.Wait()
	})
	return f
}

// push publishes s (not validated) to node and returns its version.
func (f *xdsFakeCP) push(t *testing.T, node string, s *sg.Settings) string {
	t.Helper()
	snap, err := controlplane.SettingsSnapshot(xds.DefaultResourceName, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
	return settings.Version(s)
}

func (f *xdsFakeCP) nackList() []xdsNack {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]xdsNack(nil), f.nacks...)
}

// sortedDurations returns a sorted copy.
func sortedDurations(ds []time.Duration) []time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}
