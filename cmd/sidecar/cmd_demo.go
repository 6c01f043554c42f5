package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/triple"
	"github.com/stormgate/stormgate/settings"
)

type demoFlags struct {
	conns     int
	rate      float64
	heartbeat time.Duration
	duration  time.Duration
	upstreams int
	verbose   bool
	protocol  string
}

func newDemoCmd() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "See Stormgate work in ~15 s: demo provider, Stormgate, and 2,000 simulated consumers",
		Long: `demo starts, all inside this process and on 127.0.0.1 only:
  - a demo Dubbo provider,
  - Stormgate in front of it (the same code as 'sidecar run'),
  - simulated consumers: --conns connections, each heartbeating every --heartbeat,
    plus --rate requests per second spread over them.
It prints one line per second and a summary, then exits 0. Nothing to install or configure.

Watch two ratios: consumer connections vs provider connections (multiplexing), and
heartbeats per second answered by Stormgate vs heartbeats per second that reached the
provider (zero). Every column but the connection counts and latencies is a rate per second.

With --protocol triple the same runs over Dubbo 3's Triple (gRPC over h2c): a Triple echo
provider, Stormgate with upstream.protocol triple, and h2c consumers making unary calls with
checked bodies (each answer must be its call's own bytes) and PINGing when idle: the heartbeat
columns are PINGs answered by Stormgate and consumer PINGs that reached the provider (zero).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.protocol == "triple" && !cmd.Flags().Changed("heartbeat") {
				// Triple consumers PING only when idle; at the default rate each connection hears from
				// the provider about once a second, so a 1 s idle time would show almost no PINGs.
				f.heartbeat = 500 * time.Millisecond
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.conns, "conns", 2000, "simulated consumer connections")
	fl.Float64Var(&f.rate, "rate", 2000, "requests per second across all consumers")
	fl.DurationVar(&f.heartbeat, "heartbeat", time.Second, "heartbeat interval of each consumer connection (Triple: a PING after this long without an answer; 500ms unless set)")
	fl.DurationVar(&f.duration, "duration", 12*time.Second, "length of the traffic phase (the connect phase comes first)")
	fl.IntVar(&f.upstreams, "upstream-conns", 4, "Stormgate's connections to the provider")
	fl.BoolVar(&f.verbose, "verbose", false, "show Stormgate's logs")
	fl.StringVar(&f.protocol, "protocol", "dubbo", "dubbo (Dubbo 2) or triple (Dubbo 3 Triple over h2c)")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, f demoFlags) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if f.duration <= 0 || f.duration > 10*time.Minute {
		return fmt.Errorf("--duration must be between 1s and 10m")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := zap.NewNop()
	if f.verbose {
		log, _, _ = newLogger("info", "console")
	}

	if err := proxy.ConfigureNetpoll(log, proxy.DefaultNetpollBuffer, 0); err != nil {
		return err
	}
	var prov demoProvider
	switch f.protocol {
	case "dubbo":
		p, err := peer.NewProvider(peer.ProviderConfig{Addr: "127.0.0.1:0"}, log.Named("provider"))
		if err != nil {
			return err
		}
		go p.Serve(ctx) //nolint:errcheck
		prov = dubboDemoProvider{p}
	case "triple":
		p, err := peer.StartTripleEcho(peer.TripleConfig{}, log.Named("provider"))
		if err != nil {
			return err
		}
		prov = tripleDemoProvider{p}
	default:
		return fmt.Errorf("--protocol %q: want dubbo or triple", f.protocol)
	}
	defer prov.Close()

	reg := prometheus.NewRegistry()
	shipped := settings.Defaults()
	acfg := settings.AdmissionConfig(shipped)
	acfg.Address = "127.0.0.1:0"
	acfg.AcceptRate = 0 // the demo's consumers connect politely; pacing is shown by the benchmarks
	adm, err := admission.Listen(acfg, log.Named("admission"), reg)
	if err != nil {
		return err
	}
	defer adm.Close()
	pcfg := settings.ProxyConfig(shipped)
	pcfg.Upstream, pcfg.UpstreamConns = prov.Addr(), f.upstreams
	lcfg := loadgen.Config{
		Target:            adm.Addr().String(),
		Conns:             f.conns,
		HeartbeatInterval: f.heartbeat,
		Rate:              f.rate,
		Duration:          f.duration,
		Method:            "echo",
		Arg:               "hello",
	}
	hbAnswered := func(st proxy.Stats) uint64 { return st.HeartbeatsDownstream }
	if f.protocol == "triple" {
		pcfg.Protocols = proxy.ProtoTriple
		lcfg.Protocol, lcfg.BodyMin, lcfg.BodyMax = loadgen.ProtocolTriple, 16, 4096
		hbAnswered = func(proxy.Stats) uint64 { return uint64(gatheredCounter(reg, "stormgate_http2_pings_answered_total")) }
	}
	srv, err := proxy.New(pcfg,
		proxy.Options{Codec: dubbo.Codec{}, Protocol: triple.New, Logger: log.Named("proxy"), Registerer: reg, OnConnClosed: adm.ConnClosed})
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Start(ctx); err != nil {
		return err
	}
	go adm.Serve(ctx, admission.HandlerFunc(func(c admission.Conn) { //nolint:errcheck
		srv.ServeFD(c.FD, c.Remote, c.OrigDst)
	}))

	fmt.Fprintf(out, "provider  %s   (%s)\n", prov.Addr(), prov.Name())
	fmt.Fprintf(out, "stormgate %s   (%d connections to the provider)\n", adm.Addr(), f.upstreams)
	fmt.Fprintf(out, "consumers %d connections, heartbeat every %v, %.0f req/s, %v\n\n", f.conns, f.heartbeat, f.rate, f.duration)
	fmt.Fprintf(out, "%5s  %9s %8s  %14s %13s  %8s %7s  %9s %9s\n",
		"t", "consumers", "provider", "hb/s@stormgate", "hb/s@provider", "req/s", "errors", "p50", "p99")

	var last demoCounts
	start := time.Now()
	lastAt := start
	res, err := loadgen.Run(ctx, lcfg, func(s loadgen.Snapshot) {
		st := srv.Stats()
		ps := prov.Stats()
		now := time.Now()
		cur := demoCounts{hbStormgate: hbAnswered(st), hbProvider: ps.heartbeats, ok: s.OK}
		r := cur.ratesSince(last, now.Sub(lastAt))
		fmt.Fprintf(out, "%4.0fs  %9d %8d  %14.0f %13.0f  %8.0f %7d  %9s %9s\n",
			now.Sub(start).Seconds(), st.DownstreamConns, ps.connsOpen, r.hbStormgate, r.hbProvider, r.ok,
			s.Errors+s.Timeouts, fmtDur(s.P50), fmtDur(s.P99))
		last, lastAt = cur, now
	})
	if err != nil {
		return err
	}
	st := srv.Stats()
	ps := prov.Stats()
	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  connections   consumers -> Stormgate: %d    Stormgate -> provider: %d\n", res.ConnsOpened, ps.connsAccepted)
	fmt.Fprintf(out, "  %-13s answered by Stormgate: %d    reached the provider: %d    sent by Stormgate upstream: %d\n",
		prov.HeartbeatName(), hbAnswered(st), ps.heartbeats, st.HeartbeatsSent)
	fmt.Fprintf(out, "  requests      sent %d   ok %d   errors %d   timeouts %d   (provider served %d)\n",
		res.Sent, res.OK, res.Errors+res.Exceptions, res.Timeouts, ps.requests)
	fmt.Fprintf(out, "  latency       p50 %s   p99 %s   max %s   (from scheduled send time, through Stormgate)\n",
		fmtDur(res.Latency.P50), fmtDur(res.Latency.P99), fmtDur(res.Latency.Max))
	if res.BodyMax > 0 {
		fmt.Fprintf(out, "  bodies        %d answers checked byte for byte: %d not their call's own\n", res.OK+res.BodyMismatches, res.BodyMismatches)
	}
	if v := prov.Violations(); v > 0 || res.BodyMismatches > 0 {
		return fmt.Errorf("demo saw %d body mismatches; the provider recorded %d integrity violations", res.BodyMismatches, v)
	}
	if res.Errors+res.Timeouts+res.Lost > 0 {
		return fmt.Errorf("demo saw %d errors, %d timeouts, %d lost requests", res.Errors, res.Timeouts, res.Lost)
	}
	return nil
}

// demoCounts are the cumulative counters behind the demo's per-second
// columns: every column but the connection counts is a rate, so heartbeats
// and requests read alike (hb/s next to req/s).
type demoCounts struct {
	hbStormgate, hbProvider, ok uint64
}

type demoRates struct {
	hbStormgate, hbProvider, ok float64
}

// ratesSince returns the per-second rates from prev to c over d.
func (c demoCounts) ratesSince(prev demoCounts, d time.Duration) demoRates {
	if d <= 0 {
		return demoRates{}
	}
	per := func(now, before uint64) float64 { return float64(now-before) / d.Seconds() }
	return demoRates{per(c.hbStormgate, prev.hbStormgate), per(c.hbProvider, prev.hbProvider), per(c.ok, prev.ok)}
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	}
}
