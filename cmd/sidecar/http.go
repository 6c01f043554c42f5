package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/inject/appprobe"
)

// metricsMux is the metrics listener: /metrics, /healthz, /readyz, and the application
// probes sidecar inject moved here.
func (s *sidecar) metricsMux() http.Handler {
	p := s.p
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.srv.Ready() {
			http.Error(w, "not ready: draining or stopped", http.StatusServiceUnavailable)
			return
		}
		if hung := p.srv.Hung(); hung != "" {
			http.Error(w, "not ready: "+hung, http.StatusServiceUnavailable)
			return
		}
		if !s.xdsSynced.Load() {
			http.Error(w, "not ready: no settings from the control plane "+s.f.xdsAddr+" yet (see the xds log lines)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		if s.xds != nil { // detail only: traffic does not depend on the control plane
			fmt.Fprintln(w, s.xds.Status())
		}
	})
	if len(s.appProbes) > 0 {
		mux.Handle(appprobe.PathPrefix, appprobe.NewHandler(s.appProbes))
	}
	return mux
}

// adminMux is the admin listener (loopback by default): /config_dump, profiling (as Envoy
// does), POST /drain, /logging, /upgrade, /version.
func (s *sidecar) adminMux() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/config_dump", s.p.store)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/drain", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "use POST /drain", http.StatusMethodNotAllowed)
			return
		}
		select {
		case s.drain <- struct{}{}:
		default: // one is on its way
		}
		fmt.Fprintln(w, "draining")
	})
	mux.HandleFunc("/logging", loggingHandler(s.level, s.log))
	mux.Handle("/upgrade", s.u.handler(s.p.ctx))
	mux.HandleFunc("/version", versionHandler)
	return mux
}

// httpServer is one of run's HTTP listeners. Its Serve loop is one of run's goroutines; the
// goroutines serving its connections are counted in conns, so shutdown can join them too.
type httpServer struct {
	hs    *http.Server
	conns sync.WaitGroup
}

// serveHTTP serves h on ln, its Serve loop one of g's goroutines.
func serveHTTP(g *sync.WaitGroup, name string, ln net.Listener, h http.Handler, log *zap.Logger) *httpServer {
	// Log the bound address: with port 0 (tests, several sidecars per host) it is the
	// only way to learn it.
	log.Info("http listener started", zap.String("listener", name), zap.Stringer("address", ln.Addr()))
	hs := &httpServer{}
	hs.hs = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second,
		// StateNew is set on Serve's goroutine before the connection's starts; StateClosed (or
		// StateHijacked) is the last thing that goroutine does.
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				hs.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				hs.conns.Done()
			}
		}}
	g.Go(func() {
		if err := hs.hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http listener failed", zap.Stringer("addr", ln.Addr()), zap.Error(err))
		}
	})
	return hs
}

// shutdown stops serving: requests in flight get up to grace, then their connections are closed
// (which ends their contexts: a CPU profile stops). It returns when every connection's
// goroutine has ended.
func (hs *httpServer) shutdown(grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if hs.hs.Shutdown(ctx) != nil {
		_ = hs.hs.Close()
	}
	hs.conns.Wait()
}
