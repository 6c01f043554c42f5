package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/inject/appprobe"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/transparent"
	"github.com/stormgate/stormgate/xds"
	sg "github.com/stormgate/stormgate/xds/stormgatev1"
)

type runFlags struct {
	config        string
	listen        string
	upstream      string
	upstreamConns int
	metrics       string
	admin         string
	xdsAddr       string
	nodeID        string
	xdsResource   string
	xdsCA         string
	xdsCert       string
	xdsKey        string
	transparent   bool
	inboundPorts  string
	logLevel      string
	logFormat     string
	netpollBuffer int
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the sidecar in front of one Dubbo provider",
		Long: `Run Stormgate in front of one Dubbo 2 provider.

Consumers connect to --listen; Stormgate answers their heartbeats, multiplexes their
requests onto --upstream-conns connections to --upstream, holds requests while the
provider restarts, and paces connection storms.

Settings come from, lowest to highest precedence: built-in defaults, --config FILE
(YAML, the same schema as the xDS resource: see 'sidecar validate' and
docs/configuration.md), these flags, and then live pushes from --xds.

Endpoints:
  --metrics  /metrics (Prometheus), /healthz (process alive), /readyz (taking traffic; with
             --xds, only once the control plane's first settings are applied),
             /app-health/... (the application probes sidecar inject moved here, if any)
  --admin    /config_dump (active settings, version, source), POST /drain,
             /logging?level=debug (change the log level live). Keep it on loopback.

Signals: SIGTERM or SIGINT drains gracefully (READONLY to every consumer, in-flight
requests finish up to drain.timeout), then exits 0.`,
		Example: `  # standalone, provider on 20880, consumers dial 20881
  sidecar run --upstream 127.0.0.1:20880 --listen 0.0.0.0:20881

  # settings from a file, live updates from a control plane
  sidecar run --config /etc/stormgate/stormgate.yaml --xds 127.0.0.1:18000 --node-id pod-a.default

  # Kubernetes sidecar: iptables (sidecar iptables) redirects inbound 20880 to 15006
  sidecar run --transparent --listen 0.0.0.0:15006`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSidecar(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "settings file (YAML, schema of docs/configuration.md)")
	fl.StringVar(&f.listen, "listen", "0.0.0.0:20881", "address consumers connect to (listener.address)")
	fl.StringVar(&f.upstream, "upstream", "127.0.0.1:20880", "provider address (upstream.address)")
	fl.IntVar(&f.upstreamConns, "upstream-conns", 4, "connections to the provider (upstream.connections)")
	fl.StringVar(&f.metrics, "metrics", "0.0.0.0:15090", "metrics listener: /metrics /healthz /readyz (empty: off)")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:15000", "admin listener: /config_dump, POST /drain, /logging (empty: off)")
	fl.StringVar(&f.xdsAddr, "xds", "", "xDS control plane HOST:PORT (ADS over gRPC); empty: no xDS")
	fl.StringVar(&f.nodeID, "node-id", "", "xDS node id (default: $POD_NAME.$POD_NAMESPACE)")
	fl.StringVar(&f.xdsResource, "xds-resource", "stormgate", "name of the ExtensionConfig resource carrying the settings")
	fl.StringVar(&f.xdsCA, "xds-ca", "", "CA bundle to verify the control plane (enables TLS)")
	fl.StringVar(&f.xdsCert, "xds-cert", "", "client certificate for mTLS to the control plane")
	fl.StringVar(&f.xdsKey, "xds-key", "", "client key for mTLS to the control plane")
	fl.BoolVar(&f.transparent, "transparent", false, "accept iptables-REDIRECTed connections; upstream is 127.0.0.1:<original port>")
	fl.StringVar(&f.inboundPorts, "inbound-ports", "", "transparent mode: provider ports Stormgate may forward to, e.g. 20880,20881 (listener.inbound_ports)")
	fl.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error (log.level)")
	fl.StringVar(&f.logFormat, "log-format", "json", "json or console (log.format)")
	fl.IntVar(&f.netpollBuffer, "netpoll-buffer", defaultNetpollBuffer, "initial input buffer per connection in bytes (grows on demand)")
	_ = fl.MarkHidden("netpoll-buffer")
	return cmd
}

// buildSettings merges defaults, the file and the flags that were set.
func buildSettings(cmd *cobra.Command, f runFlags) (*sg.Settings, string, error) {
	s := xds.Defaults()
	source := xds.SourceDefaults
	if f.config != "" {
		fs, err := xds.LoadFile(f.config)
		if err != nil {
			return nil, "", err
		}
		s = xds.Merge(s, fs)
		source = xds.SourceFile
	}
	ch := cmd.Flags().Changed
	over := &sg.Settings{Listener: &sg.Listener{}, Upstream: &sg.Upstream{}, Log: &sg.Log{}}
	if ch("listen") {
		over.Listener.Address = proto.String(f.listen)
	}
	if ch("transparent") {
		over.Listener.Transparent = proto.Bool(f.transparent)
	}
	if ch("inbound-ports") {
		ports, err := transparent.ParsePorts(f.inboundPorts)
		if err != nil {
			return nil, "", fmt.Errorf("--inbound-ports: %w", err)
		}
		for _, p := range ports {
			over.Listener.InboundPorts = append(over.Listener.InboundPorts, int32(p))
		}
	}
	if ch("upstream") {
		over.Upstream.Address = proto.String(f.upstream)
	}
	if ch("upstream-conns") {
		over.Upstream.Connections = proto.Int32(int32(f.upstreamConns))
	}
	if ch("log-level") {
		over.Log.Level = proto.String(f.logLevel)
	}
	if ch("log-format") {
		over.Log.Format = proto.String(f.logFormat)
	}
	s = xds.Merge(s, over)
	if err := xds.Validate(s); err != nil {
		return nil, "", fmt.Errorf("invalid settings:\n%w", err)
	}
	return s, source, nil
}

func runSidecar(cmd *cobra.Command, f runFlags) error {
	settings, source, err := buildSettings(cmd, f)
	if err != nil {
		return err
	}
	log, level, err := newLogger(settings.GetLog().GetLevel(), settings.GetLog().GetFormat())
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	if err := configureNetpoll(log, f.netpollBuffer); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store, err := xds.NewStore(settings, xds.Version(settings), source, reg)
	if err != nil {
		return err
	}

	// Application probes injection moved off the redirected ports (inject/appprobe).
	appProbes, err := appprobe.Parse(os.Getenv(appprobe.EnvVar))
	if err != nil {
		return err
	}
	// With a control plane, not ready until its first settings are applied: a sidecar that cannot
	// reach it (or cannot verify it: wrong CA) must not take traffic with settings it never got.
	// Once applied they are kept when the control plane goes away, and readiness with them.
	var xdsSynced atomic.Bool
	xdsSynced.Store(f.xdsAddr == "")

	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	// Bind the HTTP listeners first: a port clash must fail before consumers are accepted.
	lns := map[string]net.Listener{}
	for name, addr := range map[string]string{"metrics": f.metrics, "admin": f.admin} {
		if addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fmt.Errorf("--%s %s: %w (pick a free address, or --%s '' to turn it off)", name, addr, err, name)
		}
		lns[name] = ln
	}

	adm, err := admission.Listen(toAdmissionConfig(settings), log.Named("admission"), reg)
	if err != nil {
		return fmt.Errorf("listener.address %s: %w", settings.GetListener().GetAddress(), err)
	}
	srv, err := proxy.New(toProxyConfig(settings), proxy.Options{
		Logger: log.Named("proxy"), Registerer: reg, OnConnClosed: adm.ConnClosed,
	})
	if err != nil {
		adm.Close()
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	log.Info("stormgate started", zap.String("version", version), zap.Stringer("listen", adm.Addr()),
		zap.String("upstream", upstreamDesc(settings)), zap.Bool("transparent", settings.GetListener().GetTransparent()),
		zap.String("settings_source", source))

	// apply makes new settings live in every stage, or refuses them whole.
	apply := func(s *sg.Settings, version, src string) error {
		if err := xds.Validate(s); err != nil {
			return err
		}
		if err := xds.CheckLive(store.Settings(), s); err != nil {
			return err
		}
		if err := srv.Update(toProxyConfig(s)); err != nil {
			return err
		}
		if err := adm.Update(toAdmissionConfig(s)); err != nil {
			return err
		}
		if l, err := zap.ParseAtomicLevel(s.GetLog().GetLevel()); err == nil {
			level.SetLevel(l.Level())
		}
		return store.Update(s, version, src)
	}

	drainCh := make(chan struct{}, 1)
	requestDrain := func() {
		select {
		case drainCh <- struct{}{}:
		default:
		}
	}
	var servers []*http.Server
	if f.metrics != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
			if !srv.Ready() {
				http.Error(w, "not ready: draining or stopped", http.StatusServiceUnavailable)
				return
			}
			if !xdsSynced.Load() {
				http.Error(w, "not ready: no settings from the control plane "+f.xdsAddr+" yet (see the xds log lines)", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
		})
		if len(appProbes) > 0 {
			mux.Handle(appprobe.PathPrefix, appprobe.NewHandler(appProbes))
		}
		servers = append(servers, serveHTTP("metrics", lns["metrics"], mux, log))
	}
	if f.admin != "" {
		mux := http.NewServeMux()
		mux.Handle("/config_dump", store)
		// Profiling on the admin listener only (loopback by default), as Envoy does.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/drain", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "use POST /drain", http.StatusMethodNotAllowed)
				return
			}
			requestDrain()
			fmt.Fprintln(w, "draining")
		})
		mux.HandleFunc("/logging", func(w http.ResponseWriter, r *http.Request) {
			if l := r.URL.Query().Get("level"); l != "" {
				lv, err := zap.ParseAtomicLevel(l)
				if err != nil {
					http.Error(w, "level must be one of debug, info, warn, error", http.StatusBadRequest)
					return
				}
				level.SetLevel(lv.Level())
			}
			fmt.Fprintf(w, "level: %s\n", level.Level())
		})
		servers = append(servers, serveHTTP("admin", lns["admin"], mux, log))
	}

	if f.xdsAddr != "" {
		nodeID, err := xds.NodeID(f.nodeID, os.Getenv)
		if err != nil {
			return err
		}
		// Base and Current (fix found by e2e/xds_live_test.go): a push is partial and
		// must merge over the startup settings (defaults < file < flags < xDS), not
		// over the bare defaults; otherwise every push "changes" listener.address
		// from the --listen value back to the default and is NACKed.
		cl, err := xds.NewClient(xds.ClientConfig{Address: f.xdsAddr, NodeID: nodeID, ResourceName: f.xdsResource,
			CA: f.xdsCA, Cert: f.xdsCert, Key: f.xdsKey, Base: settings, Current: store.Settings}, log.Named("xds"), reg)
		if err != nil {
			return err
		}
		go func() {
			err := cl.Run(ctx, func(s *sg.Settings, version string) error {
				full := xds.WithDefaults(s)
				if err := apply(full, version, xds.SourceXDS); err != nil {
					return err
				}
				if !xdsSynced.Swap(true) {
					log.Info("first settings from the control plane applied; ready", zap.String("version", version))
				}
				return nil
			})
			if err != nil && ctx.Err() == nil {
				log.Error("xds client stopped", zap.Error(err))
			}
		}()
	}

	serveErr := make(chan error, 1)
	go func() {
		serveErr <- adm.Serve(ctx, admission.HandlerFunc(func(c admission.Conn) {
			srv.ServeFD(c.FD, c.Remote, c.OrigDst)
		}))
	}()

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	var exitErr error
	select {
	case sig := <-sigs:
		log.Info("signal received; draining", zap.String("signal", sig.String()))
	case <-drainCh:
		log.Info("drain requested on the admin endpoint")
	case err := <-serveErr:
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, context.Canceled) {
			exitErr = err
			log.Error("listener stopped", zap.Error(err))
		}
	}
	adm.StopAccepting()
	dctx, cancel := context.WithTimeout(context.Background(), toProxyConfig(store.Settings()).DrainTimeout+time.Second)
	go func() {
		// A second signal skips the rest of the drain.
		select {
		case <-sigs:
			log.Warn("second signal: closing now")
			cancel()
		case <-dctx.Done():
		}
	}()
	if err := srv.Drain(dctx); err != nil {
		log.Warn("drain ended early", zap.Error(err))
	}
	cancel()
	adm.Close()
	for _, hs := range servers {
		sctx, c := context.WithTimeout(context.Background(), time.Second)
		_ = hs.Shutdown(sctx)
		c()
	}
	stop()
	log.Info("stormgate stopped")
	return exitErr
}

func serveHTTP(name string, ln net.Listener, h http.Handler, log *zap.Logger) *http.Server {
	// Log the bound address: with port 0 (tests, several sidecars per host) it is the
	// only way to learn it.
	log.Info("http listener started", zap.String("listener", name), zap.Stringer("address", ln.Addr()))
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http listener failed", zap.Stringer("addr", ln.Addr()), zap.Error(err))
		}
	}()
	return hs
}

func newLogger(level, format string) (*zap.Logger, zap.AtomicLevel, error) {
	lv, err := zap.ParseAtomicLevel(strings.ToLower(level))
	if err != nil {
		return nil, lv, fmt.Errorf("log.level %q: must be debug, info, warn or error", level)
	}
	var cfg zap.Config
	switch format {
	case "", "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
	default:
		return nil, lv, fmt.Errorf("log.format %q: must be json or console", format)
	}
	cfg.Level = lv
	cfg.Sampling = nil
	cfg.DisableStacktrace = true // operators want one line per event; errors carry their cause
	l, err := cfg.Build()
	return l, lv, err
}

// upstreamDesc says where requests go, for the start-up log line.
func upstreamDesc(s *sg.Settings) string {
	if s.GetListener().GetTransparent() {
		return fmt.Sprintf("127.0.0.1:<original port>, ports %v", s.GetListener().GetInboundPorts())
	}
	return s.GetUpstream().GetAddress()
}
