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

Signals: SIGUSR1 kill now and restart after --down; SIGUSR2 read normally for --calm (ends a
stall; make soak sends it before each leak sample, so that no sample catches a slow spell's
backlog); SIGINT or SIGTERM stop.`,
		Example: `  stormbench echo-provider --listen 127.0.0.1:20880 --seed 42
  stormbench echo-provider --listen 127.0.0.1:20880 --restart-every 60s --slow-chance 0.3 --stall-chance 0.05
  stormbench load --target 127.0.0.1:20881 --conns 1000 --rate 1000 --body-max 262144 --one-way 0.1`,
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
	f.StringVar(&o.protocol, "protocol", "dubbo", "dubbo, or triple: an h2c Triple/gRPC provider that answers every unary call with its message (see above)")
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
	Stats      *peer.EchoStats   `json:"stats,omitempty"`
	Triple     *peer.TripleStats `json:"triple,omitempty"`
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
	if o.protocol != "dubbo" && o.protocol != "triple" {
		return fmt.Errorf("--protocol %q: want dubbo or triple", o.protocol)
	}
	log, err := newProviderLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	emit := newEmitter(stdout)
	if o.protocol == "triple" {
		return runTripleEcho(ctx, o, log, sigs, emit)
	}

	killMode, err := peer.ParseKillMode(o.kill)
	if err != nil {
		return fmt.Errorf("--kill: %w", err)
	}
	p, err := peer.StartEcho(peer.EchoConfig{
		Addr: o.listen, Seed: o.seed, RecvBuf: o.rcvbuf, MaxSegment: o.mss, MaxFrame: o.maxFrame, Kill: killMode,
	}, log)
	if err != nil {
		return err
	}
	emit(echoEvent{Event: "listening", Addr: p.Addr(), Seed: o.seed})
	log.Info("echo provider listening", zap.String("addr", p.Addr()), zap.Uint64("seed", o.seed))

	rng := rand.New(rand.NewPCG(o.seed, 0xec40))
	spell := time.NewTimer(0)
	defer spell.Stop()
	restartC, stopRestart := ticks(o.restart)
	defer stopRestart()
	statsC, stopStats := ticks(o.statsEvery)
	defer stopStats()
	up := time.NewTimer(time.Hour)
	up.Stop()
	defer up.Stop()
	var calmUntil time.Time
	kill := func() {
		p.Kill()
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
				calmUntil = time.Now().Add(o.calm)
				p.SetReading(peer.Reading{})
				p.Stall(0)
				emit(echoEvent{Event: "calm"})
			default:
				break loop
			}
		case <-restartC:
			kill()
		case <-up.C:
			if err := p.Restart(); err != nil {
				_ = p.Close()
				return fmt.Errorf("restart: %w", err)
			}
			emit(echoEvent{Event: "restarted", Addr: p.Addr()})
		case <-spell.C:
			d := o.spell/2 + time.Duration(rng.Int64N(int64(o.spell)))
			switch x := rng.Float64(); {
			case time.Now().Before(calmUntil):
				p.SetReading(peer.Reading{})
			case x < o.stallChance:
				p.Stall(d)
			case x < o.stallChance+o.slowChance:
				p.SetReading(o.slow)
			default:
				p.SetReading(peer.Reading{})
			}
			spell.Reset(d)
		case <-statsC:
			st := p.Stats()
			emit(echoEvent{Event: "stats", Stats: &st})
		}
	}
	_ = p.Close()
	st := p.Stats()
	emit(echoEvent{Event: "final", Stats: &st, Violations: p.Violations()})
	return violationsExit(st.Violations)
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
