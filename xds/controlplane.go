package xds

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"

	sg "github.com/stormgate/stormgate/xds/stormgatev1"
)

// ControlPlaneConfig configures the reference control plane.
type ControlPlaneConfig struct {
	// Config is a control-plane YAML file, or a directory whose *.yaml and
	// *.yml files (not hidden, not recursive) are read in name order: their
	// defaults merge in that order, a node id may appear in one file only.
	Config string
	// ResourceName is the TypedExtensionConfig name served;
	// "" = DefaultResourceName. Clients must ask for the same name.
	ResourceName string
	// Poll is how often the config is re-read; 0 = 500ms.
	Poll time.Duration
	// ServerOptions are passed to grpc.NewServer (e.g. grpc.Creds for TLS).
	ServerOptions []grpc.ServerOption
}

// ControlPlane serves per-node Settings over ADS from YAML with a
// go-control-plane server and snapshot cache. It validates a config before
// publishing it (a bad edit is logged, naming the fields, and the previous
// config keeps being served), serves only what the file sets (each sidecar
// merges it over its own startup settings), serves the default to any node id without an
// override, pushes on file change, and does not re-send a version a client
// has NACKed until that node's settings change (go-control-plane#962).
type ControlPlane struct {
	cfg   ControlPlaneConfig
	log   *zap.Logger
	cache cachev3.SnapshotCache

	mu    sync.Mutex
	file  *ControlPlaneFile      // last valid config
	sum   [32]byte               // hash of the config files last read, valid or not
	nodes map[string]bool        // node ids seen on a stream
	sent  map[int64]sentResponse // per stream: the last ExtensionConfig response

	publishes *prometheus.CounterVec
	nacks     prometheus.Counter
}

type sentResponse struct{ nonce, version string }

// NewControlPlane reads and validates the config (an invalid config at start
// is an error) and registers stormgate_control_plane_loads_total{result} and
// stormgate_control_plane_nacks_total on reg (may be nil). log may be nil.
func NewControlPlane(cfg ControlPlaneConfig, log *zap.Logger, reg prometheus.Registerer) (*ControlPlane, error) {
	if cfg.ResourceName == "" {
		cfg.ResourceName = DefaultResourceName
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if log == nil {
		log = zap.NewNop()
	}
	cp := &ControlPlane{
		cfg:   cfg,
		log:   log,
		cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, log.Named("cache").Sugar()),
		nodes: map[string]bool{},
		sent:  map[int64]sentResponse{},
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stormgate_control_plane_loads_total",
			Help: "Config reloads by result: published, or invalid (not published; the previous config stays).",
		}, []string{"result"}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stormgate_control_plane_nacks_total",
			Help: "Settings pushes NACKed by sidecars.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{cp.publishes, cp.nacks} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	sum, f, err := readControlPlaneConfig(cfg.Config)
	if err != nil {
		return nil, err
	}
	cp.sum, cp.file = sum, f
	return cp, nil
}

// Run listens on addr and serves until ctx is cancelled.
func (cp *ControlPlane) Run(ctx context.Context, addr string) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return cp.Serve(ctx, lis)
}

// Serve serves ADS on lis and watches the config until ctx is cancelled,
// then stops the gRPC server (closing every stream), waits for its
// goroutines and returns nil; it returns the gRPC server's error if serving
// fails first. Serve closes lis.
func (cp *ControlPlane) Serve(ctx context.Context, lis net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := append([]grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Minute, PermitWithoutStream: true}),
	}, cp.cfg.ServerOptions...)
	gs := grpc.NewServer(opts...)
	xs := serverv3.NewServer(ctx, cp.cache, serverv3.CallbackFuncs{
		StreamRequestFunc:  cp.onRequest,
		StreamResponseFunc: cp.onResponse,
		StreamClosedFunc:   func(id int64, _ *core.Node) { cp.mu.Lock(); delete(cp.sent, id); cp.mu.Unlock() },
	})
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	cp.mu.Lock()
	cp.publishLocked(ctx)
	cp.mu.Unlock()

	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- gs.Serve(lis) })
	wg.Go(func() { cp.watch(ctx) })
	cp.log.Info("control plane serving", zap.String("listen", lis.Addr().String()), zap.String("config", cp.cfg.Config))
	var err error
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	cancel()
	gs.Stop() // ADS streams never end by themselves: no graceful wait
	wg.Wait()
	return err
}

// Overlay returns the partial settings currently served to nodeID (see
// ControlPlaneFile.Overlay).
func (cp *ControlPlane) Overlay(nodeID string) *sg.Settings {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.file.Overlay(nodeID)
}

// watch re-reads the config every Poll and publishes valid changes.
func (cp *ControlPlane) watch(ctx context.Context) {
	t := time.NewTicker(cp.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cp.reload(ctx)
	}
}

func (cp *ControlPlane) reload(ctx context.Context) {
	sum, f, err := readControlPlaneConfig(cp.cfg.Config)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if sum == cp.sum {
		return // unchanged since last read (valid or not): nothing to say
	}
	cp.sum = sum
	if err != nil {
		cp.publishes.WithLabelValues("invalid").Inc()
		var ps Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				cp.log.Error("config invalid, not published; still serving the previous config",
					zap.String("config", cp.cfg.Config), zap.String("field", p.Field), zap.String("problem", p.Error()))
			}
		} else {
			cp.log.Error("config unreadable, not published; still serving the previous config", zap.Error(err))
		}
		return
	}
	cp.file = f
	cp.publishLocked(ctx)
	cp.publishes.WithLabelValues("published").Inc()
}

// publishLocked sets a snapshot for every node with an override and every
// node seen so far. Caller holds cp.mu. SetSnapshot may hand a response to
// a stream's goroutine while that goroutine waits for cp.mu in onRequest;
// it cannot block on it: each stream's response channel has room for one
// response per type and this server serves one type.
func (cp *ControlPlane) publishLocked(ctx context.Context) {
	ids := cp.file.NodeIDs()
	for id := range cp.nodes {
		if _, ok := cp.file.Nodes[id]; !ok {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		cp.setSnapshotLocked(ctx, id)
	}
	cp.log.Info("config published", zap.Int("nodes", len(ids)), zap.String("default_version", Version(cp.file.Overlay(""))))
}

func (cp *ControlPlane) setSnapshotLocked(ctx context.Context, id string) {
	snap, err := SettingsSnapshot(cp.cfg.ResourceName, cp.file.Overlay(id))
	if err == nil {
		err = cp.cache.SetSnapshot(ctx, id, snap)
	}
	if err != nil {
		cp.log.Error("cannot publish", zap.String("node_id", id), zap.Error(err))
	}
}

// SettingsSnapshot builds a go-control-plane snapshot carrying s as the
// TypedExtensionConfig named name, versioned by content (Version).
func SettingsSnapshot(name string, s *sg.Settings) (*cachev3.Snapshot, error) {
	return settingsSnapshot(name, Version(s), s)
}

func settingsSnapshot(name, version string, s *sg.Settings) (*cachev3.Snapshot, error) {
	tc, err := anypb.New(s)
	if err != nil {
		return nil, err
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{
		resource.ExtensionConfigType: {&core.TypedExtensionConfig{Name: name, TypedConfig: tc}},
	})
	if err != nil {
		return nil, err
	}
	return snap, snap.Consistent()
}

func (cp *ControlPlane) onResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	if resp.GetTypeUrl() != ExtensionConfigType {
		return
	}
	cp.mu.Lock()
	cp.sent[id] = sentResponse{nonce: resp.GetNonce(), version: resp.GetVersionInfo()}
	cp.mu.Unlock()
}

// onRequest runs before the server hands the request to the cache.
func (cp *ControlPlane) onRequest(id int64, req *discovery.DiscoveryRequest) error {
	if req.GetTypeUrl() != ExtensionConfigType {
		return nil
	}
	node := req.GetNode().GetId()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if node != "" && !cp.nodes[node] {
		cp.nodes[node] = true
		cp.setSnapshotLocked(context.Background(), node)
		if !slices.Contains(req.GetResourceNames(), cp.cfg.ResourceName) {
			cp.log.Warn("node asks for other resources than the one served; it will get no settings",
				zap.String("node_id", node), zap.Strings("asked", req.GetResourceNames()), zap.String("served", cp.cfg.ResourceName))
		}
	}
	last, ok := cp.sent[id]
	if !ok || req.GetResponseNonce() != last.nonce {
		return nil
	}
	if req.GetErrorDetail() != nil {
		cp.nacks.Inc()
		cp.log.Warn("node rejected settings (NACK)", zap.String("node_id", node),
			zap.String("rejected_version", last.version), zap.String("running_version", req.GetVersionInfo()),
			zap.String("error", req.GetErrorDetail().GetMessage()))
		// Park the watch on the rejected version: the snapshot cache would
		// otherwise re-send it at once, and the client would NACK again.
		req.VersionInfo = last.version
		return nil
	}
	cp.log.Debug("node applied settings (ACK)", zap.String("node_id", node), zap.String("version", req.GetVersionInfo()))
	return nil
}

// readControlPlaneConfig reads a file or a directory and returns the hash of
// what it read (names and contents) and the validated config.
func readControlPlaneConfig(path string) ([32]byte, *ControlPlaneFile, error) {
	var sum [32]byte
	fi, err := os.Stat(path)
	if err != nil {
		return sum, nil, err
	}
	files := []string{path}
	if fi.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return sum, nil, err
		}
		for _, e := range entries {
			n := e.Name()
			if e.IsDir() || strings.HasPrefix(n, ".") || (!strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml")) {
				continue
			}
			files = append(files, filepath.Join(path, n))
		}
		sort.Strings(files)
	}
	h := sha256.New()
	datas := make([][]byte, len(files))
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return sum, nil, err
		}
		datas[i] = b
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	h.Sum(sum[:0])
	out := &ControlPlaneFile{Nodes: map[string]*sg.Settings{}}
	var ps Problems
	for i, f := range files {
		one, err := ParseControlPlaneYAML(datas[i])
		if err != nil {
			var fps Problems
			if !errors.As(err, &fps) {
				return sum, nil, fmt.Errorf("%s: %w", f, err)
			}
			for _, p := range fps {
				p.File = filepath.Base(f)
				ps = append(ps, p)
			}
			continue
		}
		out.Default = Merge(out.Default, one.Default)
		for id, s := range one.Nodes {
			if _, dup := out.Nodes[id]; dup {
				ps = append(ps, Problem{Field: "nodes." + id, Message: "defined in more than one file", File: filepath.Base(f)})
				continue
			}
			out.Nodes[id] = s
		}
	}
	if len(ps) == 0 && len(files) > 1 {
		// Each file was valid alone; check what they make together.
		if err := Validate(WithDefaults(out.Default)); err != nil {
			ps = append(ps, prefixed(err, "default.")...)
		}
		for _, id := range out.NodeIDs() {
			if err := Validate(out.For(id)); err != nil {
				ps = append(ps, prefixed(err, "nodes."+id+".")...)
			}
		}
	}
	if len(ps) > 0 {
		return sum, nil, ps
	}
	return sum, out, nil
}

func prefixed(err error, prefix string) Problems {
	var ps Problems
	errors.As(err, &ps)
	for i := range ps {
		ps[i].Field = prefix + ps[i].Field
	}
	return ps
}
