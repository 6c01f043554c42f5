package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/loadgen"
)

// autoSpreadAbove is the total connection count above which, against a loopback target with no
// --source-addrs, connections are spread over 127.0.0.2.. (one source address has ~28,000 ports).
const autoSpreadAbove = 25_000

type loadOptions struct {
	cfg      loadgen.Config
	sources  string
	argSize  int
	workers  int
	jsonPath string
	quiet    bool
	cpuProf  string
}

func newLoadCmd() *cobra.Command {
	var o loadOptions
	cmd := &cobra.Command{
		Use:   "load --target HOST:PORT [flags]",
		Short: "Open many Dubbo consumer connections and measure heartbeats and requests",
		Long: `load simulates Dubbo 2 consumers against one target (a provider, a TCP proxy, or Stormgate).

A run has three phases:
  connect   open --conns connections (--connect-rate per second, or all at once); heartbeats start
            as each one opens, at a random phase within --heartbeat so they never beat in step
  run       --duration of two-way requests at --rate per second in total (open loop: request k is
            due at start + k/rate, sent round-robin over the open connections, whatever happened
            before; its latency counts from that due time, so a stall anywhere shows in the tail)
  drain     up to --timeout for answers still in flight; then every connection is closed

With --body-max the requests carry raw checked bodies instead of Method(Arg) (see stormbench
echo-provider): each body holds its own length, a key unique in the run and a CRC-32C, and every
status-20 answer must be exactly the request's body. An answer that is not counts as a body
mismatch (and as foreign when it is another request's body): the integrity check of make soak.

Every outcome is counted: ok, business exceptions, errors by Dubbo status, timeouts, requests lost
when a connection closed, unsent requests (no open connection), resets, orderly closes by the
server, connect failures by kind, unknown/late/duplicate reply ids, heartbeats answered, and the
server's READONLY/WRITEABLE events and heartbeats (answered the way a Java consumer does).
A progress line is printed every second (to stderr); --json writes the full result, latency
histograms included, for scripts (use - for stdout).

One process holds up to 19,000 connections (fd limit 20,000). With more, or with --workers K, the
connections are split over K worker processes of this binary; their request phases start together
and their results are merged exactly (histograms merged, counts summed). Above 25,000 connections
to a loopback target, source addresses 127.0.0.2... are used automatically (about 28,000
connections per source address).

With --protocol triple the consumers speak Dubbo 3's Triple as dubbo-go v3.3.0 sends it without IDL:
h2c with prior knowledge, one HTTP/2 stream per unary call to /<service>/<method>, content-type
application/grpc+hessian2, the argument hessian2-wrapped (--arg as a String, or with --body-max the
checked body as a byte[], which stormbench echo-provider --protocol triple returns as the answer's
message: it is compared byte for byte). Calls wait for the server's SETTINGS and never exceed its
SETTINGS_MAX_CONCURRENT_STREAMS; flow-control windows are kept both ways. --heartbeat sends a PING
on each connection that received nothing for that long (as x/net's ReadIdleTimeout: dubbo-go PINGs
after 10 s); they count as heartbeats. A call that times out is reset (RST_STREAM CANCEL). Errors are
counted by grpc-status; grpc_status in the JSON counts every answer by it.

The tool reports its own CPU per request (request phase CPU of all its processes / requests sent),
so you can check it is not the bottleneck.

Signals: SIGUSR1 pauses the request phase (requests that fall due are not sent and count as paused;
heartbeats go on; the longest answer gap leaves the pause out), SIGUSR2 resumes it. make soak pauses
the load this way to read the sidecar's memory with nothing in flight.

Every run is bounded: --duration at most 30m, --timeout at most 1m, and the connect phase by
--connect-timeout per dial.`,
		Example: `  # 10,000 idle consumers heartbeating every second for 30 s
  stormbench load --target 127.0.0.1:20881 --conns 10000 --heartbeat 1s --duration 30s

  # fixed-rate latency: 5,000 req/s over 1,000 connections, results as JSON
  stormbench load --target 127.0.0.1:20881 --conns 1000 --rate 5000 --duration 30s --json out.json

  # the 100 ms method, connections opened at 2,000/s
  stormbench load --target 127.0.0.1:20881 --conns 10000 --connect-rate 2000 --rate 5000 \
      --method sleep --arg 100ms --duration 30s

  # integrity: unique bodies of 1 B..256 KiB, 10% one-way, checked byte for byte
  stormbench load --target 127.0.0.1:20881 --conns 1000 --rate 1000 --duration 60s \
      --body-max 262144 --one-way 0.1 --heartbeat 10s

  # Triple: 1,000 h2c consumers, checked bodies, PINGs on connections idle for 10 s
  stormbench load --protocol triple --target 127.0.0.1:20881 --conns 1000 --rate 1000 --duration 30s \
      --body-max 65536 --heartbeat 10s

  # 40,000 connections: 3 worker processes, sources 127.0.0.2-127.0.0.3 picked automatically
  stormbench load --target 127.0.0.1:20881 --conns 40000 --heartbeat 30s --duration 60s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLoad(cmd.Context(), o, cmd.ErrOrStderr(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	c := &o.cfg
	f.StringVar(&c.Target, "target", "", "host:port to connect to (required)")
	f.StringVar(&c.Protocol, "protocol", loadgen.ProtocolDubbo, "dubbo (Dubbo 2) or triple (Dubbo 3 Triple: h2c, one stream per unary call, PINGs as heartbeats)")
	f.IntVar(&c.Conns, "conns", 100, "consumer connections in total (split over worker processes above 19,000)")
	f.Float64Var(&c.ConnectRate, "connect-rate", 0, "connections opened per second; 0 = all at once")
	f.IntVar(&c.DialConcurrency, "dial-concurrency", loadgen.DefaultDialConcurrency, "dials in flight at most, per process")
	f.DurationVar(&c.ConnectTimeout, "connect-timeout", loadgen.DefaultConnectTimeout, "timeout of each dial")
	f.StringVar(&o.sources, "source-addrs", "", "local source addresses, round-robin: list and ranges, e.g. 127.0.0.2-127.0.0.9")
	f.DurationVar(&c.HeartbeatInterval, "heartbeat", 0, "heartbeat interval per connection (random phase); 0 = none")
	f.BoolVar(&c.ProbeOnConnect, "probe-on-connect", false, "send one heartbeat as soon as each connection opens (first-reply time)")
	f.Float64Var(&c.Rate, "rate", 0, "two-way requests per second in total, open loop; 0 = none")
	f.Uint64Var(&c.Requests, "requests", 0, "stop after this many requests; 0 = rate × duration")
	f.DurationVar(&c.Duration, "duration", 10*time.Second, "length of the request phase (after connecting), at most 30m")
	f.DurationVar(&c.Timeout, "timeout", loadgen.DefaultTimeout, "per request and heartbeat, from its scheduled time")
	f.StringVar(&c.Service, "service", loadgen.DefaultService, "service (interface) name")
	f.StringVar(&c.Method, "method", loadgen.DefaultMethod, "method name; it takes one String argument")
	f.StringVar(&c.Arg, "arg", loadgen.DefaultArg, "the String argument")
	f.IntVar(&o.argSize, "arg-size", 0, "if > 0, the argument is this many 'x' (overrides --arg)")
	f.IntVar(&c.BodyMin, "body-min", 1, "with --body-max: smallest checked body, bytes")
	f.IntVar(&c.BodyMax, "body-max", 0, "if > 0, every request carries a unique checked body (1 B..8 MiB, log-uniform from --body-min) that an echo provider returns; each answer is compared byte for byte")
	f.Float64Var(&c.OneWay, "one-way", 0, "with --body-max: fraction of requests sent one-way (0..1)")
	f.Uint64Var(&c.Seed, "seed", 0, "seed of body sizes, one-way draws and heartbeat phases; 0 = random (the result records it)")
	f.DurationVar(&c.Reconnect, "reconnect", 0, "redial a closed connection after this delay; 0 = stay closed")
	f.BoolVar(&c.HonorReadonly, "honor-readonly", false, "stop sending on a connection after READONLY (until WRITEABLE), as Dubbo consumers do")
	f.BoolVar(&c.LeaveOnReadonly, "leave-on-readonly", false, "after READONLY send nothing more on the connection (heartbeats neither) and close it once its answers are in, as a Dubbo consumer does when the registry drops the provider; implies --honor-readonly")
	f.IntVar(&c.MaxFrame, "max-frame", loadgen.DefaultMaxFrame, "largest frame accepted from the server (header + body); with --protocol triple, the largest answer message")
	f.IntVar(&o.workers, "workers", 0, "worker processes; 0 = one per 19,000 connections")
	f.StringVar(&o.jsonPath, "json", "", "write the result as JSON to this file (- = stdout)")
	f.BoolVar(&o.quiet, "quiet", false, "no progress lines")
	f.StringVar(&o.cpuProf, "cpuprofile", "", "write a Go CPU profile of this process to the file (tool tuning)")
	_ = f.MarkHidden("cpuprofile")
	_ = cmd.MarkFlagRequired("target")
	return cmd
}

func runLoad(ctx context.Context, o loadOptions, stderr, stdout io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := o.cfg
	if o.argSize > 0 {
		if o.argSize > 4<<20 {
			return errors.New("--arg-size above 4 MiB")
		}
		cfg.Arg = strings.Repeat("x", o.argSize)
	}
	if o.sources != "" {
		addrs, err := parseAddrList(o.sources)
		if err != nil {
			return err
		}
		cfg.SourceAddrs = addrs
	}
	if cfg.Conns < 1 {
		return errors.New("--conns must be at least 1")
	}
	workers := o.workers
	if workers <= 0 {
		workers = (cfg.Conns + loadgen.MaxConnsPerProcess - 1) / loadgen.MaxConnsPerProcess
	}
	if workers > cfg.Conns {
		workers = cfg.Conns
	}
	if cfg.Conns > workers*loadgen.MaxConnsPerProcess {
		return fmt.Errorf("%d connections need at least %d workers", cfg.Conns, (cfg.Conns+loadgen.MaxConnsPerProcess-1)/loadgen.MaxConnsPerProcess)
	}
	if len(cfg.SourceAddrs) == 0 && cfg.Conns > autoSpreadAbove && isLoopbackTarget(cfg.Target) {
		cfg.SourceAddrs = loopbackSources((cfg.Conns + 19_999) / 20_000)
		fmt.Fprintf(stderr, "stormbench: spreading %d connections over source addresses %v..%v\n",
			cfg.Conns, cfg.SourceAddrs[0], cfg.SourceAddrs[len(cfg.SourceAddrs)-1])
	}
	// Validate the per-process share now, so a bad flag fails before any process starts.
	share := splitConfig(cfg, workers)[0]
	if err := share.Validate(); err != nil {
		return err
	}

	cfg.Pause = new(atomic.Bool)
	pauses := make(chan bool, 8) // to the workers, if any
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	go forwardPauses(ctx, sigs, cfg.Pause, pauses)

	if o.cpuProf != "" {
		f, err := os.Create(o.cpuProf)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	p := newPrinter(stderr, o.quiet)
	fmt.Fprintf(stderr, "stormbench: %d connections to %s in %d process(es); rate %g/s for %v; heartbeat %v\n",
		cfg.Conns, cfg.Target, workers, cfg.Rate, cfg.Duration, cfg.HeartbeatInterval)
	var res *loadgen.Result
	var err error
	if workers == 1 {
		res, err = loadgen.Run(ctx, cfg, p.progress)
	} else {
		res, err = runWorkers(ctx, cfg, workers, p.progress, pauses)
	}
	if res != nil && errors.Is(err, context.Canceled) {
		err = errors.New("interrupted: the figures above are partial")
	}
	if res != nil {
		printSummary(stderr, res)
		if o.jsonPath != "" {
			if werr := writeJSON(o.jsonPath, res, stdout); werr != nil && err == nil {
				err = werr
			}
		}
	}
	return err
}

func writeJSON(path string, res *loadgen.Result, stdout io.Writer) error {
	b, err := res.JSON()
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" {
		_, err = stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func isLoopbackTarget(target string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// workerKeySpan separates the body keys of worker processes: worker i's keys start at
// KeyBase + i*workerKeySpan (2^40 requests each is far beyond any run's bound).
const workerKeySpan = 1 << 40

// splitConfig divides cfg over n processes: connections, rates and request caps in proportion
// (remainders to the first ones), source addresses rotated so workers start on different ones,
// body keys in disjoint ranges, seeds distinct.
func splitConfig(cfg loadgen.Config, n int) []loadgen.Config {
	out := make([]loadgen.Config, n)
	var reqLeft uint64 = cfg.Requests
	for i := range out {
		c := cfg
		c.Conns = cfg.Conns / n
		if i < cfg.Conns%n {
			c.Conns++
		}
		frac := float64(c.Conns) / float64(cfg.Conns)
		c.Rate = cfg.Rate * frac
		c.ConnectRate = cfg.ConnectRate * frac
		if cfg.Requests > 0 {
			c.Requests = uint64(math.Floor(float64(cfg.Requests) * frac))
			if i == n-1 {
				c.Requests = reqLeft
			}
			reqLeft -= c.Requests
		}
		c.KeyBase = cfg.KeyBase + uint64(i)*workerKeySpan
		if cfg.Seed != 0 {
			c.Seed = cfg.Seed + uint64(i)
		}
		if k := len(cfg.SourceAddrs); k > 1 {
			c.SourceAddrs = append(append([]netip.Addr{}, cfg.SourceAddrs[i%k:]...), cfg.SourceAddrs[:i%k]...)
		}
		out[i] = c
	}
	return out
}

// forwardPauses turns SIGUSR1 (pause) and SIGUSR2 (resume) into pause's value and a message on
// pauses for worker processes (dropped if nobody reads it: the flag is what counts in-process),
// until ctx ends.
func forwardPauses(ctx context.Context, sigs <-chan os.Signal, pause *atomic.Bool, pauses chan<- bool) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-sigs:
			p := sig == syscall.SIGUSR1
			pause.Store(p)
			select {
			case pauses <- p:
			default:
			}
		}
	}
}
