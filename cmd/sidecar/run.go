package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/inject/appprobe"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/triple"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
)

// runSidecar is `sidecar run`: build the plane (fresh, or restored after an upgrade), serve
// until a signal or POST /drain, drain. Every goroutine it starts is joined before it returns.
func runSidecar(cmd *cobra.Command, f runFlags) error {
	if f.preflight {
		return runPreflight(cmd, f)
	}
	sigs := catchSignals()
	defer sigs.stop()
	o, err := newOrigin()
	if err != nil {
		return err
	}
	s, err := start(cmd, f, o)
	if err != nil {
		return err
	}
	defer s.log.Sync()           //nolint:errcheck
	defer runtime.KeepAlive(s.p) // as in start: serve may roll back too
	if err := s.serve(); err != nil {
		return err
	}
	exitErr := s.wait(cmd, sigs)
	s.shutdown(sigs.term, exitErr)
	return exitErr
}

// signals are run's. SIGUSR2 and the stop signals are caught at once: SIGUSR2 upgrades; a
// stop signal that arrives while a new image restores waits until it serves (then it drains)
// instead of ending it, and every connection, as Go's default for SIGTERM would. SIGHUP is
// caught once the plane serves (wait).
type signals struct {
	usr2, term chan os.Signal
}

func catchSignals() signals {
	s := signals{usr2: make(chan os.Signal, 1), term: make(chan os.Signal, 2)}
	signal.Notify(s.usr2, syscall.SIGUSR2)
	signal.Notify(s.term, syscall.SIGTERM, syscall.SIGINT)
	return s
}

func (s signals) stop() {
	signal.Stop(s.usr2)
	signal.Stop(s.term)
}

// sidecar is one run: the plane, the control plane's client, the upgrader, the HTTP
// listeners, and every goroutine they start (goroutines, joined by shutdown).
type sidecar struct {
	f         runFlags
	o         origin
	log       *zap.Logger
	level     zap.AtomicLevel
	base      settings.Layered // defaults < file < flags
	p         *plane
	stop      context.CancelFunc // ends p.ctx
	xds       *xds.Client        // nil without --xds
	xdsSynced atomic.Bool        // the control plane's first settings are in force (or there is none)
	firstSync chan struct{}      // closed when xdsSynced turns true
	appProbes appprobe.Set
	reg       *prometheus.Registry
	u         *upgrader
	http      []*httpServer
	drain     chan struct{} // POST /drain

	goroutines sync.WaitGroup
}

// start builds the plane, fresh or restored, up to the point where it can serve: everything
// that can fail fails here, and everything that can fail without a socket fails before one is
// bound. A failure rolls an upgrade back (origin.fail).
func start(cmd *cobra.Command, f runFlags, o origin) (*sidecar, error) {
	if err := checkPollers(f.pollers); err != nil {
		return nil, o.fail(nil, err)
	}
	if f.xdsAddr != "" {
		if _, err := xds.NodeID(f.nodeID, os.Getenv); err != nil {
			return nil, o.fail(nil, fmt.Errorf("--xds %s: %w", f.xdsAddr, err))
		}
	}
	base, active, err := o.settings(cmd, f)
	if err != nil {
		return nil, o.fail(nil, err)
	}
	log, level, err := newLogger(active.GetLog().GetLevel(), active.GetLog().GetFormat())
	if err != nil {
		return nil, o.fail(nil, err)
	}
	s := &sidecar{f: f, o: o, log: log, level: level, base: base, firstSync: make(chan struct{}), drain: make(chan struct{}, 1)}
	if err := s.build(active); err != nil {
		err = o.fail(log, err)
		// A rollback execs from inside fail: the restored admitter must still own the
		// listening socket then (an unreachable os.File's finalizer would close it).
		runtime.KeepAlive(s)
		return nil, err
	}
	return s, nil
}

// build makes the plane from the settings in force: the metrics registry and the settings
// store, the control plane's client, the HTTP listeners, admission, the data plane, the
// upgrader.
func (s *sidecar) build(active *sg.Settings) error {
	f, o, log := s.f, s.o, s.log
	// The access log is on or off by its own settings (access_log), not by log.level.
	accessLog, _, err := newLogger("info", active.GetLog().GetFormat())
	if err != nil {
		return err
	}
	if err := proxy.ConfigureNetpoll(log, f.netpollBuffer, f.pollers); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	s.reg = reg
	reg.MustRegister(newGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := registerBuildInfo(reg); err != nil {
		return err
	}
	store, err := o.store(s.base, active, reg)
	if err != nil {
		return err
	}
	store.SetBuildVersion(version)
	store.SetLiveLogLevel(func() string { return s.level.Level().String() })
	// With a control plane, not ready until its first settings are in force (applied, or equal
	// to the startup ones: ACKed): a sidecar that cannot reach it (or cannot verify it: wrong
	// CA) must not take traffic with settings it never got. Once applied they are kept when
	// the control plane goes away, and readiness with them (also across an upgrade: the
	// settings in force are handed over).
	s.xdsSynced.Store(f.xdsAddr == "" || o.upgraded())
	if f.xdsAddr != "" {
		// Base is the startup settings (fix found by e2e/xds_live_test.go): a push is
		// partial and merges over defaults < file < flags, not over the bare defaults.
		if s.xds, err = newXDSClient(f, s.base.Settings, store, log.Named("xds"), reg, func(version string) {
			if !s.xdsSynced.Swap(true) {
				log.Info("first settings from the control plane in force; ready", zap.String("version", version))
				close(s.firstSync)
			}
		}); err != nil {
			return err
		}
	}
	// Application probes injection moved off the redirected ports (inject/appprobe).
	if s.appProbes, err = appprobe.Parse(os.Getenv(appprobe.EnvVar)); err != nil {
		return err
	}

	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	// The HTTP listeners first: a port clash must fail before consumers are accepted.
	lns, err := o.listeners(f)
	if err != nil {
		return err
	}
	p := &plane{ctx: ctx, log: log, reg: reg, store: store, lns: lns, goroutines: &s.goroutines}
	s.p = p
	if p.adm, err = o.admitter(settings.AdmissionConfig(active), log.Named("admission"), reg); err != nil {
		return err
	}
	p.admNow.Store(p.adm)
	opts := proxy.Options{Codec: dubbo.Codec{}, Protocol: triple.New, Logger: log.Named("proxy"), AccessLogger: accessLog.Named("access"), Registerer: reg,
		OnConnClosed: func() { p.admNow.Load().ConnClosed() }}
	if p.srv, err = o.proxy(settings.ProxyConfig(active), opts); err != nil {
		return err
	}
	p.live = &liveSettings{log: log, store: store, srv: p.srv, adm: p.adm, level: s.level}
	p.handler = admission.HandlerFunc(func(c admission.Conn) { p.srv.ServeFD(c.FD, c.Remote, c.OrigDst) })
	self, _ := os.Executable() // the path this process was started from, even if it has been replaced since
	if f.upgradeBinary != "" {
		self = f.upgradeBinary
	}
	// Not while draining, from the moment the drain is announced (drain.min_duration).
	s.u, err = newUpgrader(log.Named("upgrade"), self, store.Settings, func() bool { return !p.srv.Ready() }, reg)
	return err
}

// serve starts the control plane's client and the data plane (a fresh start waits up to
// --xds-wait for the control plane's first settings before dialling the provider), then the
// HTTP listeners and admission. A data plane that does not start still rolls back.
func (s *sidecar) serve() error {
	p, log := s.p, s.log
	if s.xds != nil {
		s.goroutines.Go(func() {
			err := s.xds.Run(p.ctx, func(set *sg.Settings, version string) error {
				return p.live.apply(set, version, settings.SourceXDS)
			})
			if err != nil && p.ctx.Err() == nil {
				log.Error("xds client stopped", zap.Error(err))
			}
		})
		if !s.o.upgraded() {
			// Dial the provider with the control plane's settings, not with the startup ones and
			// then again (issue 24: 4 connections opened, 2 retired at the first push). A push
			// before Start is applied like any other (Server.Update before Start only records
			// it); consumers wait in the kernel's accept queue meanwhile.
			waitFirstPush(log, s.firstSync, s.f.xdsWait)
		}
	}
	if err := p.srv.Start(p.ctx); err != nil {
		err = s.o.fail(log, err)
		s.stop()
		s.goroutines.Wait()
		return err
	}
	active := p.store.Settings()
	for _, w := range settings.Warnings(active) {
		log.Warn("settings warning", zap.String("field", w.Field), zap.String("warning", w.Message))
	}
	log.Info("stormgate started", zap.String("version", version), zap.Stringer("listen", p.adm.Addr()),
		zap.String("upstream", upstreamDesc(active)), zap.Bool("transparent", active.GetListener().GetTransparent()),
		zap.String("settings_source", p.store.Load().Source), zap.String("config_file", s.base.File),
		zap.Strings("set_by_flags", fieldsFrom(p.store.Load().Sources, settings.SourceFlag)),
		zap.Bool("upgraded", s.o.upgraded()), zap.Int("pollers", proxy.Pollers()))
	for _, l := range []struct {
		name string
		mux  func() http.Handler
	}{{"metrics", s.metricsMux}, {"admin", s.adminMux}} {
		if ln := p.lns[l.name]; ln != nil {
			s.http = append(s.http, serveHTTP(&s.goroutines, l.name, ln, l.mux(), log))
		}
	}
	p.serve()
	s.o.serving(s.u, log)
	return nil
}

// wait serves until a stop signal, POST /drain, or admission's Serve failing, and returns
// what run is to exit with. On its way it reloads on SIGHUP and runs upgrades (a handover
// that execs never returns).
func (s *sidecar) wait(cmd *cobra.Command, sigs signals) error {
	p, log, u := s.p, s.log, s.u
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			reloadOnHUP(p.live, cmd, s.f)
		case <-sigs.usr2:
			log.Info("SIGUSR2: upgrading", zap.String("binary", u.defaultBinary))
			u.fromSignal(p.ctx, &s.goroutines)
		case job := <-u.jobs:
			// Returns only when the exec did not happen.
			var sig os.Signal
			err := u.handover(p, job, sigs.term, &sig)
			switch {
			case errors.Is(err, errThawFailed):
				return err
			case sig != nil:
				log.Info("signal received during an upgrade; upgrade abandoned, draining", zap.String("signal", sig.String()))
				return nil
			}
		case sig := <-sigs.term:
			log.Info("signal received; draining", zap.String("signal", sig.String()))
			return nil
		case <-s.drain:
			log.Info("drain requested on the admin endpoint")
			return nil
		case err := <-p.serveErr:
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, context.Canceled) {
				log.Error("listener stopped", zap.Error(err))
				return err
			}
			return nil
		}
	}
}

// shutdown drains and stops everything run started, and returns when every goroutine has
// ended. READONLY and /readyz 503 at once; still accepting and serving for
// drain.min_duration, so consumers act on READONLY and Kubernetes takes the pod out of its
// endpoints before anything is refused (issue 14). A second signal skips the rest of it,
// another one the rest of the drain.
func (s *sidecar) shutdown(sigs <-chan os.Signal, exitErr error) {
	p, log := s.p, s.log
	p.srv.Announce()
	if w := settings.DrainSettings(p.store.Settings()).MinDuration; w > 0 && exitErr == nil {
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
	dctx, cancel := context.WithTimeout(context.Background(), settings.ProxyConfig(p.store.Settings()).DrainTimeout+time.Second)
	s.goroutines.Go(func() {
		select {
		case <-sigs:
			log.Info("another signal: closing now")
			cancel()
		case <-dctx.Done():
		}
	})
	if err := p.srv.Drain(dctx); err != nil {
		log.Warn("drain ended early", zap.Error(err))
	}
	cancel()
	p.adm.Close()
	// The xDS client, an upgrade's preflight, /upgrade requests end with the context.
	s.stop()
	for _, hs := range s.http {
		hs.shutdown(time.Second)
	}
	s.goroutines.Wait()
	log.Info("stormgate stopped")
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
