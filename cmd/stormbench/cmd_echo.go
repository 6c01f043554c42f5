package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/peer"
)

type echoOptions struct {
	listen      string
	seed        uint64
	rcvbuf      int
	mss         int
	maxFrame    int
	spell       time.Duration
	slowChance  float64
	stallChance float64
	slow        peer.Reading
	restart     time.Duration
	down        time.Duration
	calm        time.Duration
	statsEvery  time.Duration
	logLevel    string
	kill        string
	protocol    string
	triple      peer.TripleConfig
}

func newEchoCmd() *cobra.Command {
	var o echoOptions
	cmd := &cobra.Command{
		Use:   "echo-provider",
		Short: "Run a provider that echoes raw bodies, reads badly and checks everything it reads",
		Long: `Run peer.EchoProvider, the provider of Stormgate's integrity tests, until a signal stops it.

It treats request bodies as raw bytes (no hessian): every two-way request is answered with
status 20, the request's id and exactly the request's body; heartbeats get the Java reply;
one-way requests are checked and counted. Pair it with stormbench load --body-max, whose
checked bodies carry their own length, a unique key and a CRC-32C.

It reads badly: a small receive buffer (--rcvbuf) and MSS (--mss), and spells of --spell
(random 0.5..1.5x) in which it reads normally, slowly (--slow-chance: random 1..--max-read
byte reads with random pauses) or not at all (--stall-chance). With --restart-every, or on
SIGUSR1, it is killed (every connection reset, listener closed) and listens again on the same
port --down later.

It records as a violation what a correct proxy never sends: a bad magic or length, a body that
fails its own check, an upstream id repeated on a connection, a body delivered twice (across
restarts too), any response frame.

stdout, one JSON object per line: {"event":"listening","addr":...,"seed":...} once listening;
{"event":"killed"} and {"event":"restarted"}; {"event":"stats",...} every --stats-every; and
{"event":"final","stats":...,"violations":[...]} at exit. The exit status is 3 when any
violation was recorded. Logs go to stderr.

With --protocol triple it is the Triple (gRPC over h2c) echo provider instead (peer.TripleEcho, the
same HTTP/2 codec Stormgate runs): every unary call gets :status 200, its own content-type, exactly
its request message and grpc-status 0. It records as violations a frame the codec rejects, a stream
beyond --max-streams, a malformed head or message, a checked body that fails its check and a body
delivered twice, and it counts the PINGs it receives, apart those stormbench load sent (load_pings:
0 behind Stormgate, which answers consumers' PINGs itself). --restart-every, --down, --kill and SIGUSR1
kill and restart it as they do the Dubbo one (keys seen before a kill still count); the bad-reading
flags do not apply, and SIGUSR2 is ignored.

With --protocol both it is one port serving both (peer.UnifiedEcho), as a Dubbo 3 provider with
port unification does: the provider a sidecar with upstream.protocol both expects at its one
upstream address. Each connection's first bytes pick the provider that serves it: the HTTP/2
client preface the Triple one, the Dubbo magic 0xdabb the Dubbo one; it checks and counts what it
reads exactly as it does alone. First bytes that are neither close the connection and count as a
violation (kind "unknown protocol"). A kill (SIGUSR1, --restart-every) kills both at once; keys seen
before it still count in each. The reading flags and SIGUSR2 apply to the Dubbo half, --rcvbuf and
--mss to the one listener (both halves), --max-streams, --window and --delay to the Triple half.
Stats and final lines carry "stats" (the Dubbo half), "triple" (the Triple half) and "sniff" (the
listener: connections accepted, handed to each half, foreign, closed before their first bytes
decided, and silent: still undecided at a kill, such as an idle Dubbo client, which says nothing
until it has a request or heartbeat to send); "violations" lists both halves' (with their
"protocol") and the listener's.

Signals: SIGUSR1 kill now and restart after --down; SIGUSR2 read normally for --calm (ends a
stall; make soak sends it before each leak sample, so that no sample catches a slow spell's
backlog); SIGINT or SIGTERM stop.`,
		Example: `  stormbench echo-provider --listen 127.0.0.1:20880 --seed 42
  stormbench echo-provider --listen 127.0.0.1:20880 --restart-every 60s --slow-chance 0.3 --stall-chance 0.05
  stormbench load --target 127.0.0.1:20881 --conns 1000 --rate 1000 --body-max 262144 --one-way 0.1
  # the provider of a sidecar with upstream.protocol both (Dubbo and Triple consumers on one port)
  stormbench echo-provider --protocol both --listen 127.0.0.1:20880 --slow-chance 0 --stall-chance 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEcho(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:20880", "TCP address to listen on (port 0 picks a free port; see the printed addr)")
	f.Uint64Var(&o.seed, "seed", 0, "seed of the read sizes, pauses and spells; 0 = random (printed)")
	f.IntVar(&o.rcvbuf, "rcvbuf", 4096, "SO_RCVBUF of accepted connections, bytes (the kernel doubles it); 0 = the kernel's default")
	f.IntVar(&o.mss, "mss", 1460, "TCP_MAXSEG the provider advertises (Ethernet: 1460; keeps the sender's send buffer small); 0 = loopback's")
	f.IntVar(&o.maxFrame, "max-frame", 0, "largest frame accepted, header included; larger is a violation; 0 means 8 MiB")
	f.DurationVar(&o.spell, "spell", 2*time.Second, "mean length of a reading spell")
	f.Float64Var(&o.slowChance, "slow-chance", 0.3, "fraction of spells read slowly")
	f.Float64Var(&o.stallChance, "stall-chance", 0.05, "fraction of spells with no reading at all")
	f.IntVar(&o.slow.MaxRead, "max-read", 2048, "slow spells: each read asks for a random 1..max-read bytes")
	f.Float64Var(&o.slow.PauseChance, "pause-chance", 0.02, "slow spells: chance of a pause after each read")
	f.DurationVar(&o.slow.MaxPause, "max-pause", 5*time.Millisecond, "slow spells: a pause lasts a random 0..max-pause")
	f.DurationVar(&o.restart, "restart-every", 0, "kill and restart the provider at this interval; 0 = only on SIGUSR1")
	f.DurationVar(&o.down, "down", time.Second, "how long a killed provider stays down before listening again")
	f.StringVar(&o.kill, "kill", "abort", "how a kill ends the connections: abort (SO_LINGER 0: a RST that says nothing of what was read), close (as the kernel does when a process dies: a RST if bytes are unread, else a FIN), alternate (abort, close, abort, ...)")
	f.DurationVar(&o.calm, "calm", 10*time.Second, "after SIGUSR2, read normally for this long")
	f.DurationVar(&o.statsEvery, "stats-every", 10*time.Second, "print a stats line at this interval; 0 = never")
	f.StringVar(&o.logLevel, "log-level", "warn", "debug, info, warn or error")
	f.StringVar(&o.protocol, "protocol", "dubbo", "dubbo; triple: an h2c Triple/gRPC provider that answers every unary call with its message; both: one port serving both, the provider of upstream.protocol both (see above)")
	f.Uint32Var(&o.triple.MaxConcurrentStreams, "max-streams", 0, "triple: SETTINGS_MAX_CONCURRENT_STREAMS announced; 0 = 100")
	f.Uint32Var(&o.triple.InitialWindowSize, "window", 0, "triple: stream receive window, bytes; 0 = 65,535")
	f.DurationVar(&o.triple.Delay, "delay", 0, "triple: hold every answer this long")
	return cmd
}

// echoEvent is one line of the echo provider's stdout.
type echoEvent struct {
	Event      string            `json:"event"`
	At         time.Time         `json:"at"`
	Addr       string            `json:"addr,omitempty"`
	Seed       uint64            `json:"seed,omitempty"`
	Stats      *peer.EchoStats   `json:"stats,omitempty"`  // the Dubbo provider's (--protocol both: its Dubbo half's)
	Triple     *peer.TripleStats `json:"triple,omitempty"` // the Triple provider's (both: its Triple half's)
	Sniff      *peer.SniffStats  `json:"sniff,omitempty"`  // both: the listener's, by where connections went
	Violations []peer.Violation  `json:"violations,omitempty"`
}

func runEcho(ctx context.Context, o echoOptions, stdout, stderr io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	switch {
	case o.slowChance < 0 || o.stallChance < 0 || o.slowChance+o.stallChance > 1:
		return fmt.Errorf("--slow-chance %v and --stall-chance %v: each in [0, 1], together at most 1", o.slowChance, o.stallChance)
	case o.spell <= 0:
		return fmt.Errorf("--spell %v: want a positive duration such as 2s", o.spell)
	case o.restart < 0 || o.down < 0:
		return fmt.Errorf("--restart-every %v and --down %v must not be negative", o.restart, o.down)
	}
	if o.seed == 0 {
		o.seed = rand.Uint64()
	}
	killMode, err := peer.ParseKillMode(o.kill)
	if err != nil {
		return fmt.Errorf("--kill: %w", err)
	}
	log, err := newProviderLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	dcfg := peer.EchoConfig{Addr: o.listen, Seed: o.seed, RecvBuf: o.rcvbuf, MaxSegment: o.mss, MaxFrame: o.maxFrame, Kill: killMode}
	tcfg := o.triple
	tcfg.Addr, tcfg.Kill = o.listen, killMode
	var srv echoServer
	switch o.protocol {
	case "dubbo":
		p, err := peer.StartEcho(dcfg, log)
		if err != nil {
			return err
		}
		srv = echoDubbo{p}
	case "triple":
		p, err := peer.StartTripleEcho(tcfg, log)
		if err != nil {
			return err
		}
		srv = echoTriple{p}
	case "both":
		p, err := peer.StartUnifiedEcho(dcfg, tcfg, log)
		if err != nil {
			return err
		}
		srv = echoBoth{p}
	default:
		return fmt.Errorf("--protocol %q: want dubbo, triple or both", o.protocol)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	return serveEcho(ctx, o, srv, log, sigs, newEmitter(stdout))
}

// echoServer is an echo provider as the command runs it: peer.EchoProvider (--protocol dubbo),
// peer.TripleEcho (triple) or peer.UnifiedEcho (both).
type echoServer interface {
	Addr() string
	Kill()
	Restart() error
	Close() error
	Violations() []peer.Violation
	// stats puts a snapshot of the counters into e and returns how many violations they count.
	stats(e *echoEvent) uint64
}

// badReader is an echo server whose reading can be made bad (the Dubbo one, and the Dubbo half of
// both); the Triple one reads normally.
type badReader interface {
	SetReading(peer.Reading)
	Stall(time.Duration)
}

type (
	echoDubbo  struct{ *peer.EchoProvider }
	echoTriple struct{ *peer.TripleEcho }
	echoBoth   struct{ *peer.UnifiedEcho }
)

func (p echoDubbo) stats(e *echoEvent) uint64 {
	st := p.Stats()
	e.Stats = &st
	return st.Violations
}

func (p echoTriple) stats(e *echoEvent) uint64 {
	st := p.Stats()
	e.Triple = &st
	return st.Violations
}

func (p echoBoth) stats(e *echoEvent) uint64 {
	st := p.Stats()
	e.Stats, e.Triple, e.Sniff = &st.Dubbo, &st.Triple, &st.Sniff
	return st.Dubbo.Violations + st.Triple.Violations + st.Sniff.Foreign
}

var (
	_ badReader = echoDubbo{}
	_ badReader = echoBoth{}
)

// serveEcho runs srv until ctx ends or a stop signal: kills and restarts on SIGUSR1 and
// --restart-every, reading spells and SIGUSR2's calm for a badReader (SIGUSR2 is ignored otherwise,
// not left to its default action, which ends the process), a stats line every --stats-every, and
// the final line. It returns violationsExit's verdict.
func serveEcho(ctx context.Context, o echoOptions, srv echoServer, log *zap.Logger, sigs <-chan os.Signal, emit func(echoEvent)) error {
	emit(echoEvent{Event: "listening", Addr: srv.Addr(), Seed: o.seed})
	log.Info("echo provider listening", zap.String("protocol", o.protocol), zap.String("addr", srv.Addr()), zap.Uint64("seed", o.seed))
	reader, _ := srv.(badReader)
	rng := rand.New(rand.NewPCG(o.seed, 0xec40))
	spell := time.NewTimer(0)
	defer spell.Stop()
	var spellC <-chan time.Time // nil (never ready) without a badReader
	if reader != nil {
		spellC = spell.C
	}
	restartC, stopRestart := ticks(o.restart)
	defer stopRestart()
	statsC, stopStats := ticks(o.statsEvery)
	defer stopStats()
	up := time.NewTimer(time.Hour)
	up.Stop()
	defer up.Stop()
	var calmUntil time.Time
	kill := func() {
		srv.Kill()
		emit(echoEvent{Event: "killed"})
		up.Reset(o.down)
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case sig := <-sigs:
			switch sig {
			case syscall.SIGUSR1:
				kill()
			case syscall.SIGUSR2:
				if reader != nil {
					calmUntil = time.Now().Add(o.calm)
					reader.SetReading(peer.Reading{})
					reader.Stall(0)
					emit(echoEvent{Event: "calm"})
				}
			default:
				break loop
			}
		case <-restartC:
			kill()
		case <-up.C:
			if err := srv.Restart(); err != nil {
				_ = srv.Close()
				return fmt.Errorf("restart: %w", err)
			}
			emit(echoEvent{Event: "restarted", Addr: srv.Addr()})
		case <-spellC:
			d := o.spell/2 + time.Duration(rng.Int64N(int64(o.spell)))
			switch x := rng.Float64(); {
			case time.Now().Before(calmUntil):
				reader.SetReading(peer.Reading{})
			case x < o.stallChance:
				reader.Stall(d)
			case x < o.stallChance+o.slowChance:
				reader.SetReading(o.slow)
			default:
				reader.SetReading(peer.Reading{})
			}
			spell.Reset(d)
		case <-statsC:
			e := echoEvent{Event: "stats"}
			srv.stats(&e)
			emit(e)
		}
	}
	_ = srv.Close()
	e := echoEvent{Event: "final", Violations: srv.Violations()}
	n := srv.stats(&e)
	emit(e)
	return violationsExit(n)
}

// newEmitter returns a function that writes one echoEvent a line to w, stamped with the time; safe for
// concurrent use.
func newEmitter(w io.Writer) func(echoEvent) {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(e echoEvent) {
		e.At = time.Now().UTC()
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
	}
}

// violationsExit is an echo provider's result: exit status 3 when it recorded n > 0 violations.
func violationsExit(n uint64) error {
	if n > 0 {
		return &exitError{code: 3, err: fmt.Errorf("%d integrity violations (see the final line)", n)}
	}
	return nil
}

// ticks returns a ticker's channel and its stop, or a nil channel (never ready) when d <= 0.
func ticks(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// exitError asks main for a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
