package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/peer"
)

type providerOptions struct {
	listen            string
	heartbeat         time.Duration
	readonlyOnSigterm bool
	maxFrame          int
	maxDelayed        int
	delays            map[string]string
	shutdownTimeout   time.Duration
	logLevel          string
	insideFile        string
	waitDisconnect    time.Duration
}

func newProviderCmd() *cobra.Command {
	var o providerOptions
	cmd := &cobra.Command{
		Use:   "provider",
		Short: "Run the project's Dubbo 2 test provider in its own process",
		Long: `Run the test provider (package peer) until a signal stops it.

Methods: echo (returns its argument), sleep ("100ms": waits, then echoes), fail (a Java
business exception), error (status 80), big ("100000": a string that long); anything else
answers status 60 SERVICE_NOT_FOUND unless it is given a --delay (then it echoes).

On stdout it prints one JSON line {"addr":"HOST:PORT"} once listening, and one JSON line
with its counters when it exits. Logs go to stderr.

Signals:
  SIGTERM  graceful: stop accepting, (with --readonly-on-sigterm) send READONLY to every
           connection as Java Dubbo does, finish in-flight requests, close
  SIGINT   immediate close (a second signal during a graceful stop closes at once)`,
		Example: `  stormbench provider --listen 127.0.0.1:0
  stormbench provider --listen 127.0.0.1:20880 --heartbeat 60s --readonly-on-sigterm --delay slow=100ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runProvider(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:20880", "TCP address to listen on (port 0 picks a free port; see the printed addr)")
	f.DurationVar(&o.heartbeat, "heartbeat", 0, "send the provider's own heartbeat on every connection at this interval (dubbo-go: 60s); 0 never")
	f.BoolVar(&o.readonlyOnSigterm, "readonly-on-sigterm", false, "on SIGTERM send READONLY to every connection before draining (Java Dubbo does; dubbo-go v3.3.0 does not)")
	f.IntVar(&o.maxFrame, "max-frame", 0, "largest frame accepted, header included; 0 means 8 MiB (dubbo.DefaultMaxFrame)")
	f.IntVar(&o.maxDelayed, "max-delayed", 0, "cap on requests waiting out a delay; over it they get status 100; 0 means 65536")
	f.StringToStringVar(&o.delays, "delay", nil, "service delay per method, e.g. --delay slow=100ms,echo=1ms (repeatable)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "longest graceful stop before closing at once")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.DurationVar(&o.waitDisconnect, "wait-disconnect", 0, "on SIGTERM, after READONLY, serve until every consumer has closed its "+
		"connection or this long has passed, then close, as Java Dubbo's server does (its dubbo.service.shutdown.wait: 10s); "+
		"0: wait for no request in flight, then half-close")
	f.StringVar(&o.insideFile, "inside-file", "", "keep in this file (a little-endian int64, shared memory) the number of two-way requests read "+
		"and not yet answered: after a SIGKILL it tells how many requests the process took with it")
	return cmd
}

func runProvider(ctx context.Context, o providerOptions, stdout, stderr io.Writer) error {
	cfg := peer.ProviderConfig{
		Addr:              o.listen,
		MaxFrame:          o.maxFrame,
		HeartbeatInterval: o.heartbeat,
		MaxDelayed:        o.maxDelayed,
		SilentShutdown:    !o.readonlyOnSigterm,
		WaitDisconnect:    o.waitDisconnect,
		Methods:           make(map[string]time.Duration, len(o.delays)),
	}
	for m, s := range o.delays {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return fmt.Errorf("--delay %s=%s: want a non-negative duration such as 100ms", m, s)
		}
		cfg.Methods[m] = d
	}
	if o.insideFile != "" {
		inside, err := sharedCounter(o.insideFile)
		if err != nil {
			return fmt.Errorf("--inside-file: %w", err)
		}
		cfg.Inside = inside
	}
	log, err := newProviderLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	// Subscribe before listening so that a signal sent right after the addr line is seen.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	p, err := peer.NewProvider(cfg, log)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	if err := enc.Encode(struct {
		Addr string `json:"addr"`
	}{p.Addr()}); err != nil {
		_ = p.Close()
		return err
	}
	log.Info("provider listening", zap.String("addr", p.Addr()), zap.Duration("heartbeat", o.heartbeat),
		zap.Bool("readonly_on_sigterm", o.readonlyOnSigterm))

	served := make(chan error, 1)
	go func() { served <- p.Serve(context.Background()) }()

	var stopErr error
	select {
	case err := <-served:
		// Serve ended without being asked to: accepting failed for good.
		_ = p.Close()
		return fmt.Errorf("provider: %w", err)
	case <-ctx.Done():
		log.Info("context ended; closing")
		_ = p.Close()
	case sig := <-sigs:
		if sig == syscall.SIGINT {
			log.Info("SIGINT; closing at once")
			_ = p.Close()
			break
		}
		log.Info("SIGTERM; shutting down gracefully", zap.Duration("timeout", o.shutdownTimeout))
		stopErr = providerShutdown(ctx, p, o.shutdownTimeout, sigs)
	}
	if err := <-served; !errors.Is(err, peer.ErrProviderClosed) {
		log.Warn("serve ended with an unexpected error", zap.Error(err))
	}
	stats := p.Stats()
	log.Info("provider stopped", zap.Any("stats", stats))
	if err := enc.Encode(stats); err != nil {
		return err
	}
	if stopErr != nil {
		return fmt.Errorf("graceful shutdown cut short: %w", stopErr)
	}
	return nil
}

// providerShutdown runs the graceful shutdown; another signal or ctx's end cuts it short.
func providerShutdown(ctx context.Context, p *peer.Provider, timeout time.Duration, sigs <-chan os.Signal) error {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-sigs:
			cancel()
		case <-done:
		}
	}()
	err := p.Shutdown(sctx)
	close(done)
	<-watched
	return err
}

func newProviderLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// sharedCounter maps the first 8 bytes of path (created or truncated) into memory shared
// with the page cache, so the value outlives the process however it ends.
func sharedCounter(path string) (*atomic.Int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(8); err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 8, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return (*atomic.Int64)(unsafe.Pointer(&mem[0])), nil // page aligned; never unmapped
}
