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
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/handover"
	"github.com/stormgate/stormgate/inject/appprobe"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/transparent"
	"github.com/stormgate/stormgate/xds"
)

type runFlags struct {
	config        string
	metrics       string
	admin         string
	xdsAddr       string
	nodeID        string
	xdsResource   string
	xdsCA         string
	xdsCert       string
	xdsKey        string
	xdsWait       time.Duration
	node          xdsNodeFlags
	set           []string
	netpollBuffer int
	pollers       int
	upgradeBinary string
	preflight     bool
}

func newRunCmd() *cobra.Command { return runCmd(new(runFlags)) }

// runCmd is `sidecar run` parsing its flags into f.
func runCmd(f *runFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the sidecar in front of one Dubbo provider",
		Long: `Run Stormgate in front of one Dubbo 2 provider.

Consumers connect to --listen; Stormgate answers their heartbeats, multiplexes their
requests onto --upstream-conns connections to --upstream, holds requests while the
provider restarts, and paces connection storms.

Settings come from, lowest to highest precedence: built-in defaults, --config FILE
(YAML, the same schema as the xDS resource: see 'sidecar validate' and
docs/configuration.md), these flags (--set PATH=VALUE reaches any setting), and then
live pushes from --xds.

Endpoints:
  --metrics  /metrics (Prometheus), /healthz (process alive), /readyz (taking traffic; with
             --xds, only once the control plane's first settings are in force),
             /app-health/... (the application probes sidecar inject moved here, if any)
  --admin    /config_dump (active settings, version, where each field came from, the
             last rejected version), POST /drain, GET /logging (the level),
             POST /logging?level=debug (change it live), GET /version,
             GET|POST /upgrade (see 'sidecar upgrade'). Keep it on loopback.

Signals: SIGTERM or SIGINT drains gracefully: /readyz answers 503 and every consumer
gets READONLY at once, Stormgate keeps accepting and serving for drain.min_duration
(default 5s; a second signal skips it), then stops accepting, lets in-flight requests
finish up to drain.timeout, and exits 0. SIGHUP re-reads --config (and
these flags) and applies it live like an xDS push: all of it or, when any field is
invalid or cannot change live, none of it (logged with every problem). With --xds,
SIGHUP is ignored: the control plane owns the settings (docs/operations.md).
SIGUSR2 upgrades in place to --upgrade-binary (default: the path this process was
started from) without closing a connection, as 'sidecar upgrade' does.`,
		Example: `  # standalone, provider on 20880, consumers dial 20881
  sidecar run --upstream 127.0.0.1:20880 --listen 0.0.0.0:20881

  # settings from a file, live updates from a control plane
  sidecar run --config /etc/stormgate/stormgate.yaml --xds 127.0.0.1:18000 --node-id pod-a.default

  # Kubernetes sidecar: iptables (sidecar iptables) redirects inbound 20880 to 15006
  sidecar run --transparent --listen 0.0.0.0:15006

  # any setting by its path, as in the file (enums in any case, sizes with units)
  sidecar run --upstream 127.0.0.1:20880 --set hold.timeout=10s --set limits.max_frame_bytes=16MiB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSidecar(cmd, *f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "settings file (YAML, schema of docs/configuration.md)")
	for _, sf := range settings.RunFlags {
		v := &settingFlag{value: sf.Default(), kind: sf.Kind()}
		pf := fl.VarPF(v, sf.Name, "", sf.Usage+" ("+sf.Path+")")
		if v.kind == "bool" {
			pf.NoOptDefVal = "true" // --transparent alone
		}
	}
	fl.StringVar(&f.metrics, "metrics", "0.0.0.0:15090", "metrics listener: /metrics /healthz /readyz (empty: off)")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:15000", "admin listener: /config_dump, POST /drain, /logging (empty: off)")
	fl.StringVar(&f.xdsAddr, "xds", "", "xDS control plane HOST:PORT (ADS over gRPC), or several replicas HOST:PORT,HOST:PORT (fails over between them); empty: no xDS")
	fl.StringVar(&f.nodeID, "node-id", "", "xDS node id (default: $POD_NAME.$POD_NAMESPACE)")
	fl.StringVar(&f.xdsResource, "xds-resource", xds.DefaultResourceName, "name of the ExtensionConfig resource carrying the settings")
	fl.StringVar(&f.xdsCA, "xds-ca", "", "CA bundle to verify the control plane (enables TLS)")
	fl.StringVar(&f.xdsCert, "xds-cert", "", "client certificate for mTLS to the control plane")
	fl.StringVar(&f.xdsKey, "xds-key", "", "client key for mTLS to the control plane")
	fl.DurationVar(&f.xdsWait, "xds-wait", time.Second, "with --xds: how long start-up waits for the control plane's first settings before dialling the provider with the startup ones (consumers wait in the accept queue meanwhile); 0: do not wait")
	fl.StringArrayVar(&f.set, "set", nil, "any setting by its path, written as in the settings file: --set hold.timeout=10s --set limits.max_frame_bytes=16MiB (repeatable; same layer as the flags above)")
	fl.IntVar(&f.netpollBuffer, "netpoll-buffer", proxy.DefaultNetpollBuffer, "initial input buffer per connection in bytes (grows on demand)")
	_ = fl.MarkHidden("netpoll-buffer")
	fl.IntVar(&f.pollers, "pollers", 0, "event loops running the data plane (netpoll pollers); 0: one per core (GOMAXPROCS). Fewer cost less CPU with many idle consumers and carry fewer requests/s (docs/operations.md, Sizing)")
	fl.StringVar(&f.upgradeBinary, "upgrade-binary", "", "binary SIGUSR2 (and 'sidecar upgrade' without --binary) upgrades to; default: the path this process was started from (replace the file, then signal)")
	fl.BoolVar(&f.preflight, "preflight", false, "check the flags and settings as run would, print a JSON report, exit (what an upgrade asks of the new binary); binds nothing")
	_ = fl.MarkHidden("preflight")
	addXDSNodeFlags(cmd, &f.node)
	return cmd
}

// startupSettings are the settings `run` starts with (defaults < file <
// flags), with the source of every field and the file they were read from.
type startupSettings struct {
	settings.Layered
	file *settings.SettingsFile // nil without --config
}

// explain names the file and line of each problem of err about a field the
// file set, one per indented line; nil stays nil.
func (s startupSettings) explain(err error) error {
	if err == nil {
		return nil
	}
	if s.file != nil {
		err = s.file.Annotate(err, s.Sources)
	}
	return problemsError{"invalid settings", err}
}

// readSettings merges defaults, the file and the flags that were set, and
// records where each field came from; it does not validate the result. Errors
// name the file and line.
func readSettings(cmd *cobra.Command, f runFlags) (startupSettings, error) {
	var ss startupSettings
	var fromFile *sg.Settings
	if f.config != "" {
		sf, err := settings.ReadSettingsFile(f.config)
		if err != nil {
			return ss, problemsError{"--config " + f.config, err}
		}
		ss.file, fromFile = sf, sf.Settings
	}
	over, err := flagSettings(cmd, f)
	if err != nil {
		return ss, err
	}
	ss.Layered = settings.MergeLayers(f.config, settings.Layer{Source: settings.SourceDefaults, Settings: settings.Defaults()},
		settings.Layer{Source: settings.SourceFile, Settings: fromFile}, settings.Layer{Source: settings.SourceFlag, Settings: over})
	return ss, nil
}

// buildSettings is readSettings, validated: what `run` starts with. With a
// validation error the (invalid) merged settings are returned too.
func buildSettings(cmd *cobra.Command, f runFlags) (settings.Layered, error) {
	ss, err := readSettings(cmd, f)
	if err != nil {
		return ss.Layered, err
	}
	return ss.Layered, ss.explain(settings.Validate(ss.Settings))
}

// settingFlag is the value of a flag of settings.RunFlags: kept as written, and decoded with
// the settings file's decoder when the flag is given (flagSettings).
type settingFlag struct{ value, kind string }

func (v *settingFlag) String() string     { return v.value }
func (v *settingFlag) Set(s string) error { v.value = s; return nil }
func (v *settingFlag) Type() string       { return v.kind }

// flagSettings returns the settings the given flags set: each flag and each --set PATH=VALUE is
// decoded by the settings file's own decoder (settings.ParseAssignments), so flags take what the file
// takes ("--log-level DEBUG", "--set limits.max_frame_bytes=16MiB"). A field given twice (by its
// flag and by --set) is refused.
func flagSettings(cmd *cobra.Command, f runFlags) (*sg.Settings, error) {
	var as []settings.Assignment
	for _, sf := range settings.RunFlags {
		fl := cmd.Flags().Lookup(sf.Name)
		if !fl.Changed {
			continue
		}
		v := fl.Value.String()
		if sf.Path == "listener.inbound_ports" {
			ports, err := transparent.ParsePorts(v)
			if err != nil {
				return nil, fmt.Errorf("--inbound-ports: %w", err)
			}
			v = "[" + transparent.FormatPorts(ports) + "]"
		}
		as = append(as, settings.Assignment{Path: sf.Path, Value: v})
	}
	for _, s := range f.set {
		a, ok := settings.ParseAssignment(s)
		if !ok {
			return nil, fmt.Errorf("--set %q: want PATH=VALUE, e.g. hold.timeout=10s", s)
		}
		as = append(as, a)
	}
	over, err := settings.ParseAssignments(as)
	if err != nil {
		return nil, problemsError{"flags (a setting given by its own flag and by --set is \"set twice\")", err}
	}
	return over, nil
}

// checkPollers refuses a --pollers value ConfigureNetpoll cannot use.
func checkPollers(n int) error {
	if n < 0 || n > proxy.MaxPollers {
		return fmt.Errorf("--pollers %d: want 0 (one per core, the default) or 1 to %d", n, proxy.MaxPollers)
	}
	return nil
}

func runSidecar(cmd *cobra.Command, f runFlags) error {
	if f.preflight {
		return runPreflight(cmd, f)
	}
	// Caught at once: SIGUSR2 upgrades; a stop signal that arrives while a new image restores
	// waits until it serves (then it drains) instead of ending it, and every connection, as
	// Go's default for SIGTERM would.
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	// A new image of an upgrade (or the old one after a rollback) restores instead of
	// binding: see upgrade.go. Any failure before it serves rolls back (rs.fail).
	var rs *restoring
	in, err := handover.FromEnv()
	if in != nil {
		rs = &restoring{in: in, start: time.Now()}
		if err != nil {
			return rs.fail(nil, err)
		}
	}
	// Everything that can fail without a socket fails before one is bound.
	if err := checkPollers(f.pollers); err != nil {
		if rs != nil {
			return rs.fail(nil, err)
		}
		return err
	}
	if f.xdsAddr != "" {
		if _, err := xds.NodeID(f.nodeID, os.Getenv); err != nil {
			return fmt.Errorf("--xds %s: %w", f.xdsAddr, err)
		}
	}
	var (
		layered settings.Layered
		active  *sg.Settings // the settings in force: the startup ones, or those handed over
		ss      settingsState
	)
	if rs != nil {
		ss, layered, active, err = restoredSettings(in.State.Sections[secSettings])
		if err != nil {
			return rs.fail(nil, err)
		}
		if faultInjection == "slow" {
			time.Sleep(500 * time.Millisecond) // test builds only: a window to aim signals at
		}
	} else {
		if layered, err = buildSettings(cmd, f); err != nil {
			return err
		}
		active = layered.Settings
	}
	base := layered.Settings // the base: defaults < file < flags
	log, level, err := newLogger(active.GetLog().GetLevel(), active.GetLog().GetFormat())
	if err != nil {
		if rs != nil {
			return rs.fail(nil, err)
		}
		return err
	}
	defer log.Sync() //nolint:errcheck
	// fail is for errors before serving: an upgrade rolls back, a start just fails.
	fail := func(err error) error {
		if rs != nil {
			return rs.fail(log, err)
		}
		return err
	}
	// The access log is on or off by its own settings (access_log), not by log.level.
	accessLog, _, err := newLogger("info", active.GetLog().GetFormat())
	if err != nil {
		return fail(err)
	}
	defer accessLog.Sync() //nolint:errcheck
	if err := proxy.ConfigureNetpoll(log, f.netpollBuffer, f.pollers); err != nil {
		return fail(err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(newGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := registerBuildInfo(reg); err != nil {
		return fail(err)
	}
	var store *settings.Store
	if rs != nil {
		store, err = restoredStore(ss, layered, active, reg)
	} else {
		store, err = settings.NewLayeredStore(layered, settings.Version(base), reg)
	}
	if err != nil {
		return fail(err)
	}
	store.SetBuildVersion(version)
	store.SetLiveLogLevel(func() string { return level.Level().String() })
	// With a control plane, not ready until its first settings are in force (applied, or equal
	// to the startup ones: ACKed): a sidecar that cannot
	// reach it (or cannot verify it: wrong CA) must not take traffic with settings it never got.
	// Once applied they are kept when the control plane goes away, and readiness with them
	// (also across an upgrade: the settings in force are handed over).
	var xdsSynced atomic.Bool
	xdsSynced.Store(f.xdsAddr == "" || rs != nil)
	firstSync := make(chan struct{})
	var xdsClient *xds.Client
	if f.xdsAddr != "" {
		// Base is the startup settings (fix found by e2e/xds_live_test.go): a push is
		// partial and merges over defaults < file < flags, not over the bare defaults.
		if xdsClient, err = newXDSClient(f, base, store, log.Named("xds"), reg, func(version string) {
			if !xdsSynced.Swap(true) {
				log.Info("first settings from the control plane in force; ready", zap.String("version", version))
				close(firstSync)
			}
		}); err != nil {
			return fail(err)
		}
	}

	// Application probes injection moved off the redirected ports (inject/appprobe).
	appProbes, err := appprobe.Parse(os.Getenv(appprobe.EnvVar))
	if err != nil {
		return fail(err)
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	// Bind the HTTP listeners first: a port clash must fail before consumers are accepted.
	lns := map[string]net.Listener{}
	if rs != nil {
		if lns, rs.listenerFiles, err = inheritedListeners(in.State.Header.Listeners); err != nil {
			return fail(err)
		}
	}
	for name, addr := range map[string]string{"metrics": f.metrics, "admin": f.admin} {
		if addr == "" || lns[name] != nil {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return fail(fmt.Errorf("--%s %s: %w (pick a free address, or --%s '' to turn it off)", name, addr, err, name))
		}
		lns[name] = ln
	}

	p := &plane{ctx: ctx, log: log, reg: reg, store: store, lns: lns}
	// A rollback execs from inside fail(): the restored admitter must still own the listening
	// socket then (an unreachable os.File's finalizer would close it).
	defer runtime.KeepAlive(p)
	if rs != nil {
		var sn admission.Snapshot
		if err = sn.UnmarshalBinary(in.State.Sections[secAdmission]); err == nil {
			p.adm, err = admission.Restore(&sn, settings.AdmissionConfig(active), log.Named("admission"), reg)
		}
	} else {
		p.adm, err = admission.Listen(settings.AdmissionConfig(active), log.Named("admission"), reg)
	}
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		if rs != nil {
			return fail(err)
		}
		return listenerError(layered, err)
	}
	p.admNow.Store(p.adm)
	opts := proxy.Options{Logger: log.Named("proxy"), AccessLogger: accessLog.Named("access"), Registerer: reg,
		OnConnClosed: func() { p.admNow.Load().ConnClosed() }}
	var psn proxy.Snapshot
	if rs != nil {
		if faultInjection == "restore" && in.Rollback == "" {
			// As late as a rollback is still safe: listeners and admission restored.
			return fail(errors.New("fault injected by a test build: this binary refuses every handed-over state"))
		}
		if err = psn.UnmarshalBinary(in.State.Sections[secProxy]); err == nil {
			p.srv, err = proxy.Restore(&psn, settings.ProxyConfig(active), opts)
		}
		if err != nil {
			// The listening socket goes back to the old binary: not closed here.
			return fail(err)
		}
	} else if p.srv, err = proxy.New(settings.ProxyConfig(active), opts); err != nil {
		p.adm.Close()
		return err
	}
	srv := p.srv
	live := &liveSettings{log: log, store: store, srv: srv, adm: p.adm, level: level}
	p.live = live
	if xdsClient != nil {
		go func() {
			err := xdsClient.Run(ctx, func(s *sg.Settings, version string) error {
				return live.apply(s, version, settings.SourceXDS)
			})
			if err != nil && ctx.Err() == nil {
				log.Error("xds client stopped", zap.Error(err))
			}
		}()
		if rs == nil {
			// Dial the provider with the control plane's settings, not with the startup ones and
			// then again (issue 24: 4 connections opened, 2 retired at the first push). A push
			// before Start is applied like any other (Server.Update before Start only records
			// it); consumers wait in the kernel's accept queue meanwhile.
			waitFirstPush(log, firstSync, f.xdsWait)
		}
	}
	if err := srv.Start(ctx); err != nil {
		return fail(err)
	}
	active = store.Settings()
	for _, w := range settings.Warnings(active) {
		log.Warn("settings warning", zap.String("field", w.Field), zap.String("warning", w.Message))
	}
	log.Info("stormgate started", zap.String("version", version), zap.Stringer("listen", p.adm.Addr()),
		zap.String("upstream", upstreamDesc(active)), zap.Bool("transparent", active.GetListener().GetTransparent()),
		zap.String("settings_source", store.Load().Source), zap.String("config_file", layered.File),
		zap.Strings("set_by_flags", fieldsFrom(store.Load().Sources, settings.SourceFlag)),
		zap.Bool("upgraded", rs != nil), zap.Int("pollers", proxy.Pollers()))
	p.handler = admission.HandlerFunc(func(c admission.Conn) { srv.ServeFD(c.FD, c.Remote, c.OrigDst) })
	self, _ := os.Executable() // the path this process was started from, even if it has been replaced since
	if f.upgradeBinary != "" {
		self = f.upgradeBinary
	}
	// Not while draining, from the moment the drain is announced (drain.min_duration).
	u, err := newUpgrader(log.Named("upgrade"), self, store.Settings, func() bool { return !srv.Ready() }, reg)
	if err != nil {
		return fail(err)
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
			if hung := srv.Hung(); hung != "" {
				http.Error(w, "not ready: "+hung, http.StatusServiceUnavailable)
				return
			}
			if !xdsSynced.Load() {
				http.Error(w, "not ready: no settings from the control plane "+f.xdsAddr+" yet (see the xds log lines)", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ready")
			if xdsClient != nil { // detail only: traffic does not depend on the control plane
				fmt.Fprintln(w, xdsClient.Status())
			}
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
		mux.HandleFunc("/logging", loggingHandler(level, log))
		mux.Handle("/upgrade", u.handler(ctx))
		mux.HandleFunc("/version", versionHandler)
		servers = append(servers, serveHTTP("admin", lns["admin"], mux, log))
	}

	p.serve()
	if rs != nil {
		// Serving: the restored sockets are this image's (a later preflight must not
		// inherit them), and there is nothing to roll back to any more.
		handover.CloseOnExec(in.State.Header.FDs...)
		rs.done(u, log)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var exitErr error
wait:
	for {
		select {
		case <-hup:
			reloadOnHUP(live, cmd, f)
			continue
		case <-usr2:
			log.Info("SIGUSR2: upgrading", zap.String("binary", u.defaultBinary))
			u.fromSignal(ctx)
			continue
		case job := <-u.jobs:
			// Returns only when the exec did not happen.
			var sig os.Signal
			err := u.handover(p, job, sigs, &sig)
			switch {
			case errors.Is(err, errThawFailed):
				exitErr = err
			case sig != nil:
				log.Info("signal received during an upgrade; upgrade abandoned, draining", zap.String("signal", sig.String()))
			default:
				continue
			}
		case sig := <-sigs:
			log.Info("signal received; draining", zap.String("signal", sig.String()))
		case <-drainCh:
			log.Info("drain requested on the admin endpoint")
		case err := <-p.serveErr:
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, context.Canceled) {
				exitErr = err
				log.Error("listener stopped", zap.Error(err))
			}
		}
		break wait
	}
	// READONLY and /readyz 503 at once; still accepting and serving for
	// drain.min_duration, so consumers act on READONLY and Kubernetes takes the pod
	// out of its endpoints before anything is refused (issue 14).
	srv.Announce()
	if w := settings.DrainSettings(store.Settings()).MinDuration; w > 0 && exitErr == nil {
		log.Info("draining: still accepting and serving for drain.min_duration; a second signal skips it",
			zap.Duration("min_duration", w))
		t := time.NewTimer(w)
		select {
		case <-t.C:
		case <-sigs:
			t.Stop()
			log.Info("second signal: skipping the rest of drain.min_duration")
		}
	}
	p.adm.StopAccepting()
	dctx, cancel := context.WithTimeout(context.Background(), settings.ProxyConfig(store.Settings()).DrainTimeout+time.Second)
	go func() {
		// Another signal skips the rest of the drain.
		select {
		case <-sigs:
			log.Info("another signal: closing now")
			cancel()
		case <-dctx.Done():
		}
	}()
	if err := srv.Drain(dctx); err != nil {
		log.Warn("drain ended early", zap.Error(err))
	}
	cancel()
	p.adm.Close()
	for _, hs := range servers {
		sctx, c := context.WithTimeout(context.Background(), time.Second)
		_ = hs.Shutdown(sctx)
		c()
	}
	stop()
	log.Info("stormgate stopped")
	return exitErr
}

// waitFirstPush waits up to limit for the control plane's first settings to be in force (synced
// closed), and says how long it waited or that it stopped waiting.
func waitFirstPush(log *zap.Logger, synced <-chan struct{}, limit time.Duration) {
	if limit <= 0 {
		return
	}
	start := time.Now()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-synced:
		log.Info("dialling the provider with the control plane's settings", zap.Duration("waited", time.Since(start).Round(time.Millisecond)))
	case <-t.C:
		log.Warn("no settings from the control plane within --xds-wait; dialling the provider with the startup settings",
			zap.Duration("xds_wait", limit), zap.String("readiness", "not ready until the first push is in force"))
	}
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
	cfg, err := loggerConfig(level, format)
	if err != nil {
		return nil, cfg.Level, err
	}
	l, err := cfg.Build()
	return l, cfg.Level, err
}

func loggerConfig(level, format string) (zap.Config, error) {
	var cfg zap.Config
	lv, err := zap.ParseAtomicLevel(strings.ToLower(level))
	if err != nil {
		return cfg, fmt.Errorf("log.level %q: must be debug, info, warn or error", level)
	}
	switch format {
	case "", "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
	default:
		return cfg, fmt.Errorf("log.format %q: must be json or console", format)
	}
	cfg.Level = lv
	// ISO-8601 UTC timestamps and durations with their unit ("1s"), in both formats.
	cfg.EncoderConfig.EncodeTime = func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
		enc.AppendString(t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	cfg.EncoderConfig.EncodeDuration = zapcore.StringDurationEncoder
	cfg.Sampling = nil
	cfg.DisableStacktrace = true // operators want one line per event; errors carry their cause
	return cfg, nil
}

// fieldsFrom lists, sorted, the fields whose value came from source.
func fieldsFrom(sources settings.FieldSources, source string) []string {
	var out []string
	for f, src := range sources {
		if src == source {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// upstreamDesc says where requests go, for the start-up log line.
func upstreamDesc(s *sg.Settings) string {
	if s.GetListener().GetTransparent() {
		return fmt.Sprintf("127.0.0.1:<original port>, ports %v", s.GetListener().GetInboundPorts())
	}
	return s.GetUpstream().GetAddress()
}
