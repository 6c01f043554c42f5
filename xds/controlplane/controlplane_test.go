package controlplane

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"

	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
)

type runningCP struct {
	cp   *Server
	addr string
	sent *atomic.Int64 // gRPC messages the server sent
	stop func()
}

// startCP serves a ControlPlane on addr ("127.0.0.1:0" for a fresh port).
func startCP(t *testing.T, addr, config string, opts ...grpc.ServerOption) *runningCP {
	t.Helper()
	return startCPWith(t, addr, config, zaptest.NewLogger(t), prometheus.NewRegistry(), opts...)
}

// startCPWith is startCP with the control plane's logger and registry.
func startCPWith(t *testing.T, addr, config string, log *zap.Logger, reg *prometheus.Registry, opts ...grpc.ServerOption) *runningCP {
	t.Helper()
	sent := &atomic.Int64{}
	opts = append(opts, grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, countingStream{ss, sent})
	}))
	cp, err := New(Config{Config: config, ServerOptions: opts}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Serve(ctx, lis) }()
	r := &runningCP{cp: cp, addr: lis.Addr().String(), sent: sent}
	var stopped atomic.Bool
	r.stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}
	t.Cleanup(r.stop)
	return r
}

type countingStream struct {
	grpc.ServerStream
	n *atomic.Int64
}

func (s countingStream) SendMsg(m any) error { s.n.Add(1); return s.ServerStream.SendMsg(m) }

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // atomic, like editors and ConfigMaps
		t.Fatal(err)
	}
}

func TestControlPlanePushesFileEdits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.yaml")
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 10s}\nnodes:\n  pod-a.ns:\n    upstream: {connections: 8}\n")
	cp := startCP(t, "127.0.0.1:0", path)
	a := startClient(t, cp.addr, "pod-a.ns", nil)
	other := startClient(t, cp.addr, "never-configured.ns", nil)

	waitFor(t, 5*time.Second, "both nodes applied", func() bool { return a.version() != "" && other.version() != "" })
	sa, _, _ := a.get()
	so, _, _ := other.get()
	if sa.GetUpstream().GetConnections() != 8 || so.GetUpstream().GetConnections() != 4 {
		t.Fatalf("per-node override: pod-a has %d conns, unknown node %d", sa.GetUpstream().GetConnections(), so.GetUpstream().GetConnections())
	}
	if a.interval() != 10*time.Second || so.GetKeepalive().GetUpstreamInterval().AsDuration() != 10*time.Second {
		t.Fatalf("default not served")
	}

	// Edit -> pushed within 2 s (poll 500 ms).
	var worst time.Duration
	for i, iv := range []string{"20s", "3s", "45s"} {
		want, _ := time.ParseDuration(iv)
		start := time.Now()
		writeFile(t, path, "default:\n  keepalive: {upstream_interval: "+iv+"}\nnodes:\n  pod-a.ns:\n    upstream: {connections: 8}\n")
		waitFor(t, 2*time.Second, "edit "+iv+" pushed to both nodes", func() bool {
			_, _, calls := other.get()
			return a.interval() == want && other.interval() == want && calls == i+2
		})
		worst = max(worst, time.Since(start))
	}
	t.Logf("file edit -> applied on the client: worst %v of 3 edits (poll 500ms)", worst)

	// A bad edit is not published; the previous settings stay; a fix is.
	loads := func(r string) float64 { return testutil.ToFloat64(cp.cp.m.loads.WithLabelValues(r)) }
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: -1s}\n")
	waitFor(t, 2*time.Second, "bad edit seen", func() bool { return loads("invalid") == 1 })
	if a.interval() != 45*time.Second || a.count("nack") != 0 {
		t.Fatalf("bad file reached the client: interval %v nacks %v", a.interval(), a.count("nack"))
	}
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 5s}\n")
	waitFor(t, 2*time.Second, "fixed edit pushed", func() bool { return a.interval() == 5*time.Second })
	sa, _, _ = a.get()
	if sa.GetUpstream().GetConnections() != 4 {
		t.Fatalf("removing the node override must restore the base value, got %d", sa.GetUpstream().GetConnections())
	}
}

// A push the sidecar cannot apply is NACKed once; the reference control
// plane does not re-send it (unlike the bare snapshot cache). The control
// plane validates over the built-in defaults; this sidecar started with a
// backoff_base of 1s, so a backoff_max of 500ms is valid there but not here.
func TestControlPlaneParksNACKedVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.yaml")
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 10s}\n")
	cp := startCP(t, "127.0.0.1:0", path)
	a := startSidecar(t, cp.addr, "n", settings.Merge(settings.Defaults(), &sg.Settings{Upstream: &sg.Upstream{BackoffBase: dur(time.Second)}}), nil)
	waitFor(t, 5*time.Second, "applied", func() bool { return a.version() != "" })

	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 10s}\n  upstream: {backoff_max: 500ms}\n")
	waitFor(t, 2*time.Second, "NACK", func() bool { return testutil.ToFloat64(cp.cp.m.nacks) == 1 })
	sentAtNACK := cp.sent.Load()
	if a.count("nack") != 1 || a.interval() != 10*time.Second {
		t.Fatalf("nack=%v interval=%v", a.count("nack"), a.interval())
	}
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 11s}\n")
	waitFor(t, 2*time.Second, "next good version", func() bool { return a.interval() == 11*time.Second })
	if got := cp.sent.Load() - sentAtNACK; got != 1 {
		t.Fatalf("%d responses after the NACK, want 1 (the next version): the rejected one was re-sent", got)
	}
	if a.count("nack") != 1 || testutil.ToFloat64(cp.cp.m.nacks) != 1 {
		t.Fatalf("more than one NACK")
	}
}

func TestClientSurvivesControlPlaneRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.yaml")
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 10s}\n")
	cp := startCP(t, "127.0.0.1:0", path)
	a := startClient(t, cp.addr, "n", nil)
	waitFor(t, 5*time.Second, "applied", func() bool { return a.version() != "" && a.connected() == 1 })
	v1 := a.version()

	cp.stop()
	waitFor(t, 5*time.Second, "client sees the control plane gone", func() bool { return a.connected() == 0 })
	if _, v, calls := a.get(); v != v1 || calls != 1 || a.interval() != 10*time.Second {
		t.Fatalf("settings changed while the control plane was away: %s after %d applies", v, calls)
	}

	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 10s}\n") // same content
	cp2 := startCP(t, cp.addr, path)
	waitFor(t, 5*time.Second, "reconnected", func() bool { return a.connected() == 1 })
	if _, _, calls := a.get(); calls != 1 {
		t.Fatalf("the same settings were applied again after reconnect (%d applies)", calls)
	}
	start := time.Now()
	writeFile(t, path, "default:\n  keepalive: {upstream_interval: 12s}\n")
	waitFor(t, 2*time.Second, "next push after restart", func() bool { return a.interval() == 12*time.Second })
	t.Logf("after control-plane restart: edit applied in %v", time.Since(start))
	_ = cp2
}

func TestControlPlaneDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "00-default.yaml"), "default:\n  keepalive: {upstream_interval: 10s}\n")
	writeFile(t, filepath.Join(dir, "10-nodes.yml"), "nodes:\n  a: {upstream: {connections: 2}}\n")
	writeFile(t, filepath.Join(dir, "notes.txt"), "ignored")
	_, f, err := cpfile.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if f.For("a").GetUpstream().GetConnections() != 2 || f.For("a").GetKeepalive().GetUpstreamInterval().AsDuration() != 10*time.Second {
		t.Fatalf("directory not merged: %v", f.For("a"))
	}
	writeFile(t, filepath.Join(dir, "20-more.yaml"), "nodes:\n  a: {upstream: {connections: 3}}\n")
	if _, _, err := cpfile.Read(dir); err == nil || !strings.Contains(err.Error(), "nodes.a: defined in two files: also at 10-nodes.yml line 2; keep one (20-more.yaml line 2)") {
		t.Fatalf("duplicate node: %v", err)
	}
	os.Remove(filepath.Join(dir, "20-more.yaml"))
	writeFile(t, filepath.Join(dir, "30-bad.yaml"), "default:\n  hold: {timeout: 2h}\n")
	if _, _, err := cpfile.Read(dir); err == nil || !strings.Contains(err.Error(), "default.hold.timeout: 2h is too large; must be between 0s and 1h (30-bad.yaml line 2)") {
		t.Fatalf("bad file: %v", err)
	}
	if _, err := New(Config{Config: dir}, nil, nil); err == nil {
		t.Fatalf("an invalid config at start must be an error")
	}
}
