package storm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/internal/childproc"
	"github.com/stormgate/stormgate/internal/netns"
	"github.com/stormgate/stormgate/settings"
)

// Target is the listener a storm runs against.
type Target string

const (
	// Stormgate is the admission package's Admitter.
	Stormgate Target = "stormgate"
	// Baseline behaves like the incident's provider: a small backlog and a slow accept loop.
	Baseline Target = "baseline"
)

// Options describe one storm. Zero fields take the defaults noted.
type Options struct {
	Target      Target // default Stormgate
	Connections int    // total, split evenly across Clients; default 10,000
	Clients     int    // client processes; default 2
	// Window bounds each client's connects in flight; 0 means no bound (all at once, as fast as
	// the client can issue connect(2)).
	Window         int
	Somaxconn      int           // net.core.somaxconn in the namespace; default 4096
	ConnectTimeout time.Duration // per connection; default 10 s (a dropped SYN is retried at 1 s, 3 s, ...)
	FirstByteWait  time.Duration // per connection, from connect start; default 30 s
	Timeout        time.Duration // the whole run; default 60 s

	// Admission configures the Stormgate target (Address is replaced by 127.0.0.1:0).
	// Nil means the shipped settings, settings.AdmissionConfig(settings.Defaults()).
	Admission *admission.Config
	// Baseline target: backlog (default 50) and the pause after each accept (default 1 ms).
	BaselineBacklog     int
	BaselineAcceptDelay time.Duration

	// Echo makes the Stormgate target a netpoll echo server (a stand-in for the proxy's
	// per-connection work): the clients' first byte is then the answer to their first request,
	// and admitted connections cost what an event loop costs.
	Echo bool
	// Steady opens this many connections before the storm, each sending a 1-byte request
	// every SteadyInterval (default 10 ms) and timing the echo: the latency that already
	// admitted connections see, before (quiet) and during the storm. Needs Echo.
	Steady         int
	SteadyInterval time.Duration
	// Quiet is how long Steady connections are measured before the storm; default 1 s.
	Quiet time.Duration
}

func (o *Options) defaults() {
	if o.Target == "" {
		o.Target = Stormgate
	}
	if o.Connections <= 0 {
		o.Connections = 10000
	}
	if o.Clients <= 0 {
		o.Clients = 2
	}
	if o.Somaxconn <= 0 {
		o.Somaxconn = 4096
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	if o.FirstByteWait <= 0 {
		o.FirstByteWait = 30 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	if o.Admission == nil {
		c := settings.AdmissionConfig(settings.Defaults())
		o.Admission = &c
	}
	if o.BaselineBacklog <= 0 {
		o.BaselineBacklog = 50
	}
	if o.BaselineAcceptDelay <= 0 {
		o.BaselineAcceptDelay = time.Millisecond
	}
	if o.SteadyInterval <= 0 {
		o.SteadyInterval = 10 * time.Millisecond
	}
	if o.Quiet <= 0 {
		o.Quiet = time.Second
	}
}

// Percentiles of a set of durations.
type Percentiles struct {
	N   int
	P50 time.Duration
	P90 time.Duration
	P99 time.Duration
	Max time.Duration
}

func percentiles(d []time.Duration) Percentiles {
	if len(d) == 0 {
		return Percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Percentiles{N: len(d), P50: at(.5), P90: at(.9), P99: at(.99), Max: d[len(d)-1]}
}

func (p Percentiles) String() string {
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v (n=%d)", p.P50.Round(time.Microsecond), p.P90.Round(time.Microsecond),
		p.P99.Round(time.Microsecond), p.Max.Round(time.Microsecond), p.N)
}

// Report is what one storm measured.
type Report struct {
	Target      Target
	Connections int
	Succeeded   int            // connected and received the server's first byte
	Errors      map[string]int // failures by kind (internal/connstorm's: "connect: ECONNREFUSED", "answer: timeout", ...)
	Connect     Percentiles    // connect(2) start to established
	FirstByte   Percentiles    // connect(2) start to the server's first byte (sent on admission/accept)
	Opening     time.Duration  // how long the clients took to issue and complete all connects (slowest client)
	// ServerCPU is the server process's CPU time (user+sys) over the run, including the
	// pacing sampler and the steady connections' echoes if any.
	ServerCPU time.Duration
	// Kernel counter deltas in the namespace over the run (ListenOverflows, ListenDrops,
	// SYN retransmits, SYN queue full, ...).
	Kernel admission.ListenCounters
	// ListenQueueMax is the longest accept queue seen (sampled every 2 ms); ListenQueueLimit its limit.
	ListenQueueMax   uint32
	ListenQueueLimit uint32

	// Stormgate target only.
	Admitted   int
	Rejected   map[string]uint64
	MaxPending int     // highest pending count sampled (every 2 ms)
	PacedRate  float64 // admissions/s over the last half of the token-paced admissions
	// MaxAheadOfRate is the most admissions any time window saw beyond rate·window: the token
	// bucket bounds it by the burst (+1). Token-paced admissions only.
	MaxAheadOfRate  float64
	ForcedByMaxWait int           // admitted at MaxWait without a token
	AdmissionSpan   time.Duration // first to last admission
	Wait            Percentiles   // accept to admission

	// Steady connections' request latency before and during the storm (Options.Steady).
	SteadyQuiet  Percentiles
	SteadyStorm  Percentiles
	SteadyErrors int
}

func (r Report) String() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s: %d/%d connections ok, errors %v, opened in %v\n", r.Target, r.Succeeded, r.Connections,
		r.Errors, r.Opening.Round(time.Millisecond))
	fmt.Fprintf(&b, "  connect    %v\n  first byte %v\n", r.Connect, r.FirstByte)
	if r.ServerCPU > 0 {
		fmt.Fprintf(&b, "  server CPU %v (%v per connection)\n", r.ServerCPU.Round(time.Millisecond),
			(r.ServerCPU / time.Duration(max(r.Connections, 1))).Round(100*time.Nanosecond))
	}
	fmt.Fprintf(&b, "  kernel: ListenOverflows %d ListenDrops %d TCPSynRetrans %d ReqQFullDrop %d ReqQFullDoCookies %d; accept queue max %d of %d\n",
		r.Kernel.ListenOverflows, r.Kernel.ListenDrops, r.Kernel.SynRetrans, r.Kernel.ReqQFullDrop, r.Kernel.ReqQFullDoCookies,
		r.ListenQueueMax, r.ListenQueueLimit)
	if r.Target == Stormgate {
		if r.SteadyQuiet.N > 0 {
			fmt.Fprintf(&b, "  steady conns quiet %v\n  steady conns storm %v (errors %d)\n", r.SteadyQuiet, r.SteadyStorm, r.SteadyErrors)
		}
		fmt.Fprintf(&b, "  admission: %d admitted over %v, paced %.0f/s (max %.0f ahead of rate), forced by MaxWait %d, max pending %d, rejected %v\n  wait %v\n",
			r.Admitted, r.AdmissionSpan.Round(time.Millisecond), r.PacedRate, r.MaxAheadOfRate, r.ForcedByMaxWait, r.MaxPending, r.Rejected, r.Wait)
	}
	return b.String()
}

// ErrNeedsRoot is returned by Run when it cannot create network namespaces.
var ErrNeedsRoot = errors.New("storm: needs root and iproute2 (ip netns) to create a network namespace")

// Run creates a network namespace, starts the target server and the client processes in it
// (re-executing this binary: its main or TestMain must call ChildMain first), runs one storm,
// and removes the namespace. It needs root.
func Run(ctx context.Context, opt Options) (Report, error) {
	opt.defaults()
	if os.Geteuid() != 0 {
		return Report{}, ErrNeedsRoot
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return Report{}, ErrNeedsRoot
	}
	exe, err := os.Executable()
	if err != nil {
		return Report{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()

	ns, err := newNetns(ctx, opt.Somaxconn)
	if err != nil {
		return Report{}, err
	}
	defer ns.Remove() //nolint:errcheck // its sockets went with the children, stopped by now

	srv, err := startChild(ctx, ns, exe, childSpec{Role: roleServer, Opt: opt})
	if err != nil {
		return Report{}, err
	}
	defer srv.stop()
	var ready struct{ Addr string }
	if err := srv.recv(&ready); err != nil {
		return Report{}, fmt.Errorf("storm: server: %w", err)
	}

	var steady *child
	if opt.Steady > 0 {
		if opt.Target != Stormgate || !opt.Echo {
			return Report{}, errors.New("storm: Steady needs the Stormgate target with Echo")
		}
		if steady, err = startChild(ctx, ns, exe, childSpec{Role: roleSteady, Opt: opt, Addr: ready.Addr, Count: opt.Steady}); err != nil {
			return Report{}, err
		}
		defer steady.stop()
		var ok struct{ Ready bool }
		if err := steady.recv(&ok); err != nil {
			return Report{}, fmt.Errorf("storm: steady client: %w", err)
		}
	}

	per := opt.Connections / opt.Clients
	clients := make([]*child, opt.Clients)
	for i := range clients {
		n := per
		if i == 0 {
			n += opt.Connections - per*opt.Clients
		}
		c, err := startChild(ctx, ns, exe, childSpec{Role: roleClient, Opt: opt, Addr: ready.Addr, Count: n})
		if err != nil {
			return Report{}, err
		}
		defer c.stop()
		clients[i] = c
		var ok struct{ Ready bool }
		if err := c.recv(&ok); err != nil {
			return Report{}, fmt.Errorf("storm: client %d: %w", i, err)
		}
	}
	if steady != nil {
		time.Sleep(opt.Quiet) // the quiet period the steady connections measure
		if err := steady.send("go"); err != nil {
			return Report{}, err
		}
	}
	for _, c := range clients { // release them together
		if err := c.send("go"); err != nil {
			return Report{}, err
		}
	}

	rep := Report{Target: opt.Target, Connections: opt.Connections, Errors: map[string]int{}}
	var connect, first []time.Duration
	for i, c := range clients {
		var cr clientReport
		if err := c.recv(&cr); err != nil {
			return Report{}, fmt.Errorf("storm: client %d: %w", i, err)
		}
		rep.Succeeded += cr.Succeeded
		for k, v := range cr.Errors {
			rep.Errors[k] += v
		}
		connect = append(connect, cr.Connect...)
		first = append(first, cr.FirstByte...)
		rep.Opening = max(rep.Opening, cr.Opening)
	}
	rep.Connect, rep.FirstByte = percentiles(connect), percentiles(first)

	all := append([]*child{srv}, clients...)
	if steady != nil {
		if err := steady.send("report"); err != nil {
			return Report{}, err
		}
		var st steadyReport
		if err := steady.recv(&st); err != nil {
			return Report{}, fmt.Errorf("storm: steady client: %w", err)
		}
		rep.SteadyQuiet, rep.SteadyStorm, rep.SteadyErrors = percentiles(st.Quiet), percentiles(st.Storm), st.Errors
		all = append(all, steady)
	}

	if err := srv.send("report"); err != nil {
		return Report{}, err
	}
	var sr serverReport
	if err := srv.recv(&sr); err != nil {
		return Report{}, fmt.Errorf("storm: server: %w", err)
	}
	rep.Kernel, rep.ServerCPU = sr.Kernel, sr.CPU
	rep.ListenQueueMax, rep.ListenQueueLimit = sr.ListenQueueMax, sr.ListenQueueLimit
	rep.Admitted, rep.Rejected, rep.MaxPending = sr.Admitted, sr.Rejected, sr.MaxPending
	rep.PacedRate, rep.ForcedByMaxWait, rep.AdmissionSpan = sr.PacedRate, sr.ForcedByMaxWait, sr.AdmissionSpan
	rep.MaxAheadOfRate = sr.MaxAheadOfRate
	rep.Wait = percentiles(sr.Waits)

	for _, c := range all {
		c.send("exit")
	}
	for _, c := range all {
		if err := c.wait(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// newNetns creates the namespace of one storm, its listen queue limit set to somaxconn.
func newNetns(ctx context.Context, somaxconn int) (*netns.Namespace, error) {
	var b [4]byte
	rand.Read(b[:])
	ns, err := netns.Create(ctx, "sg-adm-"+hex.EncodeToString(b[:]))
	if err != nil {
		return nil, fmt.Errorf("storm: %w", err)
	}
	if _, err := ns.Exec(ctx, "sysctl", "-q", "-w", fmt.Sprintf("net.core.somaxconn=%d", somaxconn)); err != nil {
		_ = ns.Remove()
		return nil, fmt.Errorf("storm: %w", err)
	}
	return ns, nil
}

// child is a re-executed copy of this binary running one role inside the namespace.
// It speaks JSON lines: commands on stdin, messages on stdout.
type child struct {
	*childproc.Proc
	ctx  context.Context // Run's: bounds every recv
	seen int             // output lines recv has read past
}

func startChild(ctx context.Context, ns *netns.Namespace, exe string, spec childSpec) (*child, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	p, err := childproc.Start(ctx, childproc.Spec{Name: fmt.Sprintf("storm %s child", spec.Role),
		Argv: []string{"ip", "netns", "exec", ns.Name, exe}, // ip execs exe: same pid
		Env:  []string{envSpec + "=" + string(js)}, Stdin: true})
	if err != nil {
		return nil, fmt.Errorf("storm: %w", err)
	}
	return &child{Proc: p, ctx: ctx}, nil
}

func (c *child) send(cmd string) error {
	_, err := io.WriteString(c.Stdin, cmd+"\n")
	return err
}

func (c *child) recv(v any) error {
	l, err := c.WaitLineAfter(c.ctx, &c.seen, func(l childproc.Line) bool { return !l.Stderr })
	if err != nil {
		return fmt.Errorf("%w (stderr: %s)", err, c.stderrTail())
	}
	return json.Unmarshal([]byte(l.Text), v)
}

// wait waits for the child to exit after "exit".
func (c *child) wait() error {
	c.Stdin.Close()
	if err := c.Wait(); err != nil {
		return fmt.Errorf("storm: child: %w (stderr: %s)", err, c.stderrTail())
	}
	return nil
}

// stop kills the child if it is still running (error paths) and reaps it.
func (c *child) stop() {
	c.Stdin.Close()
	c.Kill()
}

// stderrTail is the end of the child's stderr, for errors.
func (c *child) stderrTail() string {
	b := strings.Join(c.Lines(true), "\n")
	return b[max(0, len(b)-2000):]
}
