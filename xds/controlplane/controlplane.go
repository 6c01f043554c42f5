package controlplane

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"

	"github.com/stormgate/stormgate/xds"
	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
)

// ControlPlaneConfig configures the reference control plane.
type Config struct {
	// Config is a control-plane YAML file, or a directory whose *.yaml and
	// *.yml files (not hidden, not recursive) are read in name order: their
	// defaults merge in that order; a namespace, selector or node id may
	// appear in one file only.
	Config string
	// ResourceName is the TypedExtensionConfig name served;
	// "" = xds.DefaultResourceName. Clients must ask for the same name.
	ResourceName string
	// Poll is how often the config is re-read; 0 = 500ms.
	Poll time.Duration
	// ServerOptions are passed to grpc.NewServer (e.g. grpc.Creds for TLS).
	ServerOptions []grpc.ServerOption
}

// ControlPlane serves Settings over ADS (state of the world) from YAML with
// a go-control-plane server and snapshot cache. It validates a config before
// publishing it (a bad edit is logged, naming the fields, and the previous
// config keeps being served), serves only what the file sets (each sidecar
// merges it over its own startup settings), resolves each node by what it
// reports (cpfile.File.Resolve), pushes on file change, and does not
// re-send a version a client has NACKed until that node's settings change
// (go-control-plane#962).
//
// Scale: nodes that report the same metadata form a class, resolved once
// per config; nodes that resolve to the same settings share one immutable
// snapshot (built and versioned once). A config change re-resolves each
// class, and only nodes whose version changes get a new snapshot (and a
// push): the work of a change is proportional to the classes and the nodes
// it affects. A node's state is dropped when its last stream closes.
//
// Replicas need no coordination: versions are content hashes, so replicas
// reading the same files serve the same version to the same node, and a
// sidecar that moves from one to another sees nothing new.
type Server struct {
	cfg   Config
	log   *zap.Logger
	cache cachev3.SnapshotCache
	m     *cpMetrics

	mu      sync.Mutex
	file    *cpfile.File // last valid config
	sum     [32]byte     // hash of the config files last read, valid or not
	valid   bool         // the files as last read are valid (and published)
	streams map[int64]*cpStream
	nodes   map[string]*cpNode  // node id -> node with at least one open stream
	classes map[string]*cpClass // classKey(info) -> nodes reporting that metadata
	shared  map[string]*sharedSnapshot

	// perNodeSnapshots builds a snapshot for every node that changes, as
	// before snapshots were shared: only BenchmarkPublish sets it, to measure
	// what sharing saves.
	perNodeSnapshots bool
}

// cpStream is one ADS stream.
type cpStream struct {
	peer           string
	opened         time.Time
	node           *cpNode // nil until its first request
	nonce, version string  // the last ExtensionConfig response sent
}

// cpNode is one node id with at least one open stream.
type cpNode struct {
	info      xds.NodeInfo
	class     *cpClass
	streams   int
	connected time.Time
	res       cpfile.Resolution
	version   string    // version of the snapshot set for it
	setAt     time.Time // when that snapshot was set
	acked     string    // last version it ACKed
	rejected  string    // last version it NACKed
	rejectErr string
}

// cpClass is the nodes that report the same metadata; they resolve alike
// except for a nodes: entry of their own.
type cpClass struct {
	info    xds.NodeInfo
	members map[string]*cpNode
	res     cpfile.Resolution
	version string
}

type sharedSnapshot struct {
	snap *cachev3.Snapshot
	refs int
}

// NewControlPlane reads and validates the config (an invalid config at start
// is an error) and registers the stormgate_control_plane_* metrics on reg
// (may be nil). log may be nil.
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Server, error) {
	if cfg.ResourceName == "" {
		cfg.ResourceName = xds.DefaultResourceName
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 500 * time.Millisecond
	}
	if log == nil {
		log = zap.NewNop()
	}
	cp := &Server{
		cfg:     cfg,
		log:     log,
		cache:   cachev3.NewSnapshotCache(true, cachev3.IDHash{}, log.Named("cache").Sugar()),
		streams: map[int64]*cpStream{},
		nodes:   map[string]*cpNode{},
		classes: map[string]*cpClass{},
		shared:  map[string]*sharedSnapshot{},
	}
	cp.m = newCPMetrics(cp)
	if reg != nil {
		if err := cp.m.register(reg); err != nil {
			return nil, err
		}
	}
	sum, f, err := cpfile.Read(cfg.Config)
	if err != nil {
		return nil, err
	}
	cp.sum, cp.file, cp.valid = sum, f, true
	cp.m.loaded(true)
	return cp, nil
}

// Run listens on addr and serves until ctx is cancelled.
func (cp *Server) Run(ctx context.Context, addr string) error {
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
func (cp *Server) Serve(ctx context.Context, lis net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := append([]grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Minute, PermitWithoutStream: true}),
		// Thousands of mostly idle streams: the write buffer is returned to a
		// pool after each flush instead of staying with the connection.
		grpc.SharedWriteBuffer(true),
		// Stop waits for the stream handlers, so that Serve returns after the last one has run
		// onClosed (and logged "node disconnected"), not before: nothing of the control plane
		// outlives Serve (a test's logger panicked at a log line after its test had ended).
		grpc.WaitForHandlers(true),
	}, cp.cfg.ServerOptions...)
	gs := grpc.NewServer(opts...)
	xs := serverv3.NewServer(ctx, cp.cache, serverv3.CallbackFuncs{
		StreamOpenFunc:     cp.onOpen,
		StreamRequestFunc:  cp.onRequest,
		StreamResponseFunc: cp.onResponse,
		StreamClosedFunc:   cp.onClosed,
	})
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xs)

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

// Overlay returns the partial settings the current config serves to a node
// that reports only its id (see cpfile.File.Overlay).
func (cp *Server) Overlay(nodeID string) *sg.Settings {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.file.Overlay(nodeID)
}

// watch re-reads the config every Poll and publishes valid changes.
func (cp *Server) watch(ctx context.Context) {
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

func (cp *Server) reload(ctx context.Context) {
	sum, f, err := cpfile.Read(cp.cfg.Config)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if sum == cp.sum {
		return // unchanged since last read (valid or not): nothing to say
	}
	cp.sum = sum
	cp.valid = err == nil
	cp.m.loaded(err == nil)
	if err != nil {
		var ps settings.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				if p.File == "" { // --config is a file: problems of a directory name their file
					p.File = filepath.Base(cp.cfg.Config)
				}
				cp.log.Error("config invalid, not published; still serving the previous config",
					zap.String("config", cp.cfg.Config), zap.String("file", p.File), zap.Int("line", p.Line),
					zap.String("field", p.Field), zap.String("problem", p.Error()))
			}
		} else {
			cp.log.Error("config unreadable, not published; still serving the previous config", zap.Error(err))
		}
		return
	}
	cp.publishLocked(ctx, f)
}

// publishLocked makes f the served config: each class is resolved again,
// and every node whose version changes gets its new snapshot. Caller holds
// cp.mu. SetSnapshot may hand a response to a stream's goroutine while that
// goroutine waits for cp.mu in onRequest; it cannot block on it: each
// stream's response channel has room for one response per type and this
// server serves one type.
func (cp *Server) publishLocked(ctx context.Context, f *cpfile.File) {
	start := time.Now()
	old := cp.file
	cp.file = f
	touched := map[*cpNode]bool{}
	for _, c := range cp.classes {
		r := f.ResolveClass(c.info)
		v := settings.Version(r.Overlay)
		if v == c.version && slices.Equal(r.From, c.res.From) {
			continue
		}
		c.res, c.version = r, v
		for _, n := range c.members {
			touched[n] = true
		}
	}
	for _, ids := range [][]string{old.NodeIDs(), f.NodeIDs()} {
		for _, id := range ids {
			if n, ok := cp.nodes[id]; ok {
				touched[n] = true
			}
		}
	}
	pushed := 0
	for n := range touched {
		if cp.assignLocked(ctx, n) {
			pushed++
		}
	}
	cp.log.Info("config published", zap.Int("nodes_connected", len(cp.nodes)), zap.Int("nodes_changed", pushed),
		zap.Int("settings_versions", len(cp.shared)), zap.String("default_version", settings.Version(f.Overlay(""))),
		zap.Duration("took", time.Since(start)))
}

// assignLocked resolves n under the current config and, when its version
// changes, sets its snapshot (the cache pushes it). It reports whether the
// version changed.
func (cp *Server) assignLocked(ctx context.Context, n *cpNode) bool {
	r, v := n.class.res, n.class.version
	if s, ok := cp.file.Nodes[n.info.ID]; ok {
		r = cpfile.Resolution{Overlay: settings.Merge(r.Overlay, s), From: append(slices.Clip(r.From), "nodes."+n.info.ID)}
		v = settings.Version(r.Overlay)
	}
	n.res = r
	if v == n.version {
		return false
	}
	var snap *cachev3.Snapshot
	var err error
	if cp.perNodeSnapshots {
		snap, err = settingsSnapshot(cp.cfg.ResourceName, v, r.Overlay)
	} else {
		snap, err = cp.shareLocked(v, r.Overlay)
	}
	if err != nil {
		cp.log.Error("cannot build the snapshot", zap.String("node_id", n.info.ID), zap.Error(err))
		return false
	}
	cp.releaseLocked(n.version)
	n.version, n.setAt = v, time.Now()
	if err := cp.cache.SetSnapshot(ctx, n.info.ID, snap); err != nil {
		cp.log.Error("cannot publish", zap.String("node_id", n.info.ID), zap.Error(err))
	}
	return true
}

// shareLocked returns the one snapshot of version v, building it on first
// use, and counts the reference.
func (cp *Server) shareLocked(v string, overlay *sg.Settings) (*cachev3.Snapshot, error) {
	if s, ok := cp.shared[v]; ok {
		s.refs++
		return s.snap, nil
	}
	snap, err := settingsSnapshot(cp.cfg.ResourceName, v, overlay)
	if err != nil {
		return nil, err
	}
	cp.shared[v] = &sharedSnapshot{snap: snap, refs: 1}
	return snap, nil
}

func (cp *Server) releaseLocked(v string) {
	if s, ok := cp.shared[v]; ok {
		if s.refs--; s.refs <= 0 {
			delete(cp.shared, v)
		}
	}
}

// SettingsSnapshot builds a go-control-plane snapshot carrying s as the
// TypedExtensionConfig named name, versioned by content (Version).
func SettingsSnapshot(name string, s *sg.Settings) (*cachev3.Snapshot, error) {
	return settingsSnapshot(name, settings.Version(s), s)
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

func (cp *Server) onOpen(ctx context.Context, id int64, _ string) error {
	st := &cpStream{opened: time.Now()}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		st.peer = p.Addr.String()
	}
	cp.mu.Lock()
	cp.streams[id] = st
	cp.mu.Unlock()
	return nil
}

func (cp *Server) onResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	if resp.GetTypeUrl() != xds.ExtensionConfigType {
		return
	}
	cp.m.pushes.Inc()
	cp.mu.Lock()
	if st, ok := cp.streams[id]; ok {
		st.nonce, st.version = resp.GetNonce(), resp.GetVersionInfo()
	}
	cp.mu.Unlock()
}

// onRequest runs before the server hands the request to the cache.
func (cp *Server) onRequest(id int64, req *discovery.DiscoveryRequest) error {
	if req.GetTypeUrl() != xds.ExtensionConfigType {
		return nil
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	st, ok := cp.streams[id]
	if !ok {
		st = &cpStream{opened: time.Now()}
		cp.streams[id] = st
	}
	if st.node == nil {
		if req.GetNode().GetId() == "" {
			return status.Error(codes.InvalidArgument, "node.id is required: the control plane serves settings per node")
		}
		st.node = cp.connectLocked(st, req)
	}
	n := st.node
	if req.GetResponseNonce() == "" || req.GetResponseNonce() != st.nonce {
		return nil
	}
	from := strings.Join(n.res.From, " < ")
	if req.GetErrorDetail() != nil {
		cp.m.nacks.Inc()
		n.rejected, n.rejectErr = st.version, req.GetErrorDetail().GetMessage()
		cp.log.Warn("node rejected settings (NACK)", zap.String("node_id", n.info.ID),
			zap.String("rejected_version", st.version), zap.String("running_version", req.GetVersionInfo()),
			zap.String("settings_from", from), zap.String("error", n.rejectErr))
		// Park the watch on the rejected version: the snapshot cache would
		// otherwise re-send it at once, and the client would NACK again.
		req.VersionInfo = st.version
		return nil
	}
	v := req.GetVersionInfo()
	cp.m.acks.Inc()
	if v == n.version && n.acked != v {
		cp.m.ackSeconds.Observe(time.Since(n.setAt).Seconds())
	}
	n.acked = v
	cp.log.Info("node applied settings (ACK)", zap.String("node_id", n.info.ID), zap.String("version", v),
		zap.String("settings_from", from))
	return nil
}

// connectLocked registers the first request of a stream: a new node is
// resolved and gets its snapshot before the cache sees the request.
func (cp *Server) connectLocked(st *cpStream, req *discovery.DiscoveryRequest) *cpNode {
	info := NodeInfoOf(req.GetNode())
	n, ok := cp.nodes[info.ID]
	if ok {
		n.streams++
		cp.log.Warn("node connected on a second stream: two sidecars share this node id, or one reconnected "+
			"before its old stream was seen to close; both get the settings of the first",
			zap.String("node_id", info.ID), zap.String("peer", st.peer), zap.Int("streams", n.streams))
		return n
	}
	key := classKey(info)
	c, ok := cp.classes[key]
	if !ok {
		c = &cpClass{info: info, members: map[string]*cpNode{}}
		c.info.ID = ""
		c.res = cp.file.ResolveClass(c.info)
		c.version = settings.Version(c.res.Overlay)
		cp.classes[key] = c
	}
	n = &cpNode{info: info, class: c, streams: 1, connected: time.Now()}
	c.members[info.ID] = n
	cp.nodes[info.ID] = n
	cp.assignLocked(context.Background(), n)
	fields := []zap.Field{zap.String("node_id", info.ID), zap.String("peer", st.peer),
		zap.String("cluster", info.Cluster), zap.String("namespace", info.Namespace),
		zap.String("labels", xds.FormatLabels(info.Labels)), zap.Int32s("provider_ports", info.Ports),
		zap.String("settings_from", strings.Join(n.res.From, " < ")), zap.String("version", n.version)}
	if n.res.Level() == "default" {
		fields = append(fields, zap.String("note", "no namespace, selector or node entry matches this node, so it "+
			"gets the default; if one should, check the node id, namespace and labels it reports"))
	}
	cp.log.Info("node connected", fields...)
	if names := req.GetResourceNames(); !slices.Contains(names, cp.cfg.ResourceName) {
		cp.log.Warn("node asks for other resources than the one served; it will get no settings",
			zap.String("node_id", info.ID), zap.Strings("asked", names), zap.String("served", cp.cfg.ResourceName))
	}
	return n
}

func (cp *Server) onClosed(id int64, _ *core.Node) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	st, ok := cp.streams[id]
	delete(cp.streams, id)
	if !ok || st.node == nil {
		return
	}
	n := st.node
	if n.streams--; n.streams > 0 {
		return
	}
	cp.log.Info("node disconnected", zap.String("node_id", n.info.ID), zap.String("peer", st.peer),
		zap.Duration("connected_for", time.Since(n.connected).Round(time.Millisecond)),
		zap.String("version", n.version), zap.String("acked_version", n.acked))
	delete(n.class.members, n.info.ID)
	if len(n.class.members) == 0 {
		delete(cp.classes, classKey(n.class.info))
	}
	cp.releaseLocked(n.version)
	delete(cp.nodes, n.info.ID)
	// Pods come and go with new names: forget the node entirely.
	cp.cache.ClearSnapshot(n.info.ID)
}
