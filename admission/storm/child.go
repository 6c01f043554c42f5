package storm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/netpoll"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/internal/connstorm"
)

// envSpec carries a child's role and options (JSON) to the re-executed binary.
const envSpec = "STORMGATE_STORM_CHILD"

type role string

const (
	roleServer role = "server"
	roleClient role = "client"
	roleSteady role = "steady"
)

type childSpec struct {
	Role  role
	Opt   Options
	Addr  string // client: where to connect
	Count int    // client: how many connections
}

type serverReport struct {
	CPU              time.Duration // server process CPU (user+sys) from ready to report
	Kernel           admission.ListenCounters
	ListenQueueMax   uint32
	ListenQueueLimit uint32
	Admitted         int
	Rejected         map[string]uint64
	MaxPending       int
	PacedRate        float64
	MaxAheadOfRate   float64
	ForcedByMaxWait  int
	AdmissionSpan    time.Duration
	Waits            []time.Duration
}

type steadyReport struct {
	Quiet, Storm []time.Duration
	Errors       int
}

type clientReport struct {
	Succeeded int
	Errors    map[string]int
	Connect   []time.Duration
	FirstByte []time.Duration
	Opening   time.Duration
}

// ChildMain runs a storm child role when this process was started as one by Run, and then
// exits; otherwise it returns at once. Call it first in main or TestMain of any binary that
// calls Run.
func ChildMain() {
	js, ok := os.LookupEnv(envSpec)
	if !ok {
		return
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(js), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "storm child:", err)
		os.Exit(2)
	}
	var err error
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	switch spec.Role {
	case roleServer:
		err = runServer(spec.Opt, in, out)
	case roleClient:
		err = runClient(spec, in, out)
	case roleSteady:
		err = runSteady(spec, in, out)
	default:
		err = fmt.Errorf("unknown role %q", spec.Role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// expect reads the next command from the parent.
func expect(in *bufio.Scanner, cmd string) error {
	if !in.Scan() {
		return fmt.Errorf("parent went away before %q", cmd)
	}
	if in.Text() != cmd {
		return fmt.Errorf("got command %q, want %q", in.Text(), cmd)
	}
	return nil
}

// queueSampler records the longest accept queue and (for Stormgate) pending count.
type queueSampler struct {
	maxQueue, limit uint32
	maxPending      int
}

func runServer(opt Options, in *bufio.Scanner, out *json.Encoder) error {
	base, err := admission.KernelCounters()
	if err != nil {
		return err
	}
	if opt.Target == Baseline {
		return runBaseline(opt, base, in, out)
	}
	cfg := *opt.Admission
	cfg.Address = "127.0.0.1:0"
	log, _ := zap.NewDevelopment(zap.IncreaseLevel(zap.WarnLevel))
	a, err := admission.Listen(cfg, log, nil)
	if err != nil {
		return err
	}
	type stamp struct{ accepted, admitted time.Time }
	var mu sync.Mutex
	stamps := make([]stamp, 0, opt.Connections)
	var fds []int
	var echoConns []netpoll.Connection
	one := []byte{1}
	h := admission.HandlerFunc(func(c admission.Conn) {
		if opt.Echo {
			conn, err := netpoll.NewFDConnection(c.FD)
			if err != nil {
				unix.Close(c.FD)
				return
			}
			conn.SetOnRequest(echo)
			mu.Lock()
			echoConns = append(echoConns, conn)
		} else {
			unix.Write(c.FD, one) // the first byte: "admitted"; an empty send buffer takes it at once
			mu.Lock()
			fds = append(fds, c.FD)
		}
		stamps = append(stamps, stamp{c.AcceptedAt, c.AdmittedAt})
		mu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { a.Serve(ctx, h) })
	var qs queueSampler
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			st := a.Stats()
			qs.maxQueue = max(qs.maxQueue, st.ListenQueue)
			qs.limit = max(qs.limit, st.ListenQueueLimit)
			qs.maxPending = max(qs.maxPending, st.Pending)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	if err := out.Encode(struct{ Addr string }{a.Addr().String()}); err != nil {
		return err
	}
	cpu0 := cpuTime()
	if err := expect(in, "report"); err != nil {
		return err
	}
	// Let admission finish: every connection was admitted when clients got their first byte,
	// unless some failed; wait for pending to drain (bounded by MaxWait) anyway.
	deadline := time.Now().Add(5 * time.Second)
	for a.Stats().Pending > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cur, err := admission.KernelCounters()
	if err != nil {
		return err
	}
	cpu := cpuTime() - cpu0
	cancel()
	wg.Wait()
	st := a.Stats()

	mu.Lock()
	defer mu.Unlock()
	rep := serverReport{
		CPU: cpu, Kernel: cur.Sub(base), ListenQueueMax: qs.maxQueue, ListenQueueLimit: qs.limit,
		Admitted: len(stamps), Rejected: st.Rejected, MaxPending: qs.maxPending,
	}
	maxWait := cfg.MaxWait
	var paced []time.Time // token-paced admissions, in order
	for _, s := range stamps {
		w := s.admitted.Sub(s.accepted)
		rep.Waits = append(rep.Waits, w)
		if w >= maxWait {
			rep.ForcedByMaxWait++
		} else {
			paced = append(paced, s.admitted)
		}
	}
	if n := len(stamps); n > 1 {
		rep.AdmissionSpan = stamps[n-1].admitted.Sub(stamps[0].admitted)
	}
	// The rate while the queue was surely backlogged: the last half of the paced admissions.
	if n := len(paced); n > 4 {
		if d := paced[n-1].Sub(paced[n/2]); d > 0 {
			rep.PacedRate = float64(n-1-n/2) / d.Seconds()
		}
	}
	// The token bucket's promise: no window [t_i, t_j] admits more than burst + rate·(t_j - t_i).
	// With v_j = j - rate·t_j, a window admits (j-i+1) = v_j - v_i + 1 + rate·(t_j - t_i).
	if cfg.AcceptRate > 0 && len(paced) > 0 {
		minV := 0.0
		for j, t := range paced {
			v := float64(j) - cfg.AcceptRate*t.Sub(paced[0]).Seconds()
			minV = min(minV, v)
			rep.MaxAheadOfRate = max(rep.MaxAheadOfRate, v-minV+1)
		}
	}
	if err := out.Encode(rep); err != nil {
		return err
	}
	err = expect(in, "exit")
	for _, fd := range fds {
		unix.Close(fd)
	}
	for _, c := range echoConns {
		c.Close()
	}
	return err
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// echo answers whatever arrived with the same bytes. Only this connection's OnRequest
// writes to it, so writes are not concurrent.
func echo(_ context.Context, conn netpoll.Connection) error {
	r, w := conn.Reader(), conn.Writer()
	n := r.Len()
	b, err := r.Next(n)
	if err != nil {
		return err
	}
	buf, err := w.Malloc(n)
	if err != nil {
		return err
	}
	copy(buf, b)
	r.Release()
	return w.Flush()
}

// runSteady keeps spec.Count connections busy with 1-byte requests every SteadyInterval,
// timing each echo, and reports the latencies before and after "go".
func runSteady(spec childSpec, in *bufio.Scanner, out *json.Encoder) error {
	opt := spec.Opt
	conns := make([]net.Conn, 0, spec.Count)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range spec.Count {
		c, err := net.DialTimeout("tcp", spec.Addr, 5*time.Second)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	var stormStart atomic.Int64 // unix nanos; 0 until "go"
	stop := make(chan struct{})
	var mu sync.Mutex
	var rep steadyReport
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			// Spread the connections over the interval.
			t := time.NewTicker(opt.SteadyInterval)
			defer t.Stop()
			time.Sleep(opt.SteadyInterval * time.Duration(i) / time.Duration(len(conns)))
			b := []byte{7}
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				start := time.Now()
				c.SetDeadline(start.Add(5 * time.Second))
				_, err := c.Write(b)
				if err == nil {
					_, err = io.ReadFull(c, b)
				}
				d := time.Since(start)
				mu.Lock()
				switch {
				case err != nil:
					rep.Errors++
				case stormStart.Load() != 0 && start.UnixNano() >= stormStart.Load():
					rep.Storm = append(rep.Storm, d)
				default:
					rep.Quiet = append(rep.Quiet, d)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	if err := out.Encode(struct{ Ready bool }{true}); err != nil {
		return err
	}
	if err := expect(in, "go"); err != nil {
		return err
	}
	stormStart.Store(time.Now().UnixNano())
	if err := expect(in, "report"); err != nil {
		return err
	}
	close(stop)
	wg.Wait()
	if err := out.Encode(rep); err != nil {
		return err
	}
	return expect(in, "exit")
}

// runBaseline is the incident's provider: backlog 50 (set explicitly, as Dubbo's default),
// one accept at a time with a pause after each.
func runBaseline(opt Options, base admission.ListenCounters, in *bufio.Scanner, out *json.Encoder) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return err
	}
	if err := unix.Listen(fd, opt.BaselineBacklog); err != nil {
		return err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	var qs queueSampler
	var mu sync.Mutex
	var fds []int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // blocking accepts on their own thread; shutdown(2) ends them
		runtime.LockOSThread()
		one := []byte{1}
		for {
			nfd, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
			if err != nil {
				if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
					continue
				}
				return
			}
			unix.Write(nfd, one)
			mu.Lock()
			fds = append(fds, nfd)
			mu.Unlock()
			time.Sleep(opt.BaselineAcceptDelay)
		}
	})
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				qs.maxQueue = max(qs.maxQueue, ti.Unacked)
				qs.limit = max(qs.limit, ti.Sacked)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	if err := out.Encode(struct{ Addr string }{addr}); err != nil {
		return err
	}
	if err := expect(in, "report"); err != nil {
		return err
	}
	cur, err := admission.KernelCounters()
	if err != nil {
		return err
	}
	close(stop)
	unix.Shutdown(fd, unix.SHUT_RDWR)
	wg.Wait()
	unix.Close(fd)
	mu.Lock()
	rep := serverReport{Kernel: cur.Sub(base), ListenQueueMax: qs.maxQueue, ListenQueueLimit: qs.limit, Admitted: len(fds)}
	mu.Unlock()
	if err := out.Encode(rep); err != nil {
		return err
	}
	err = expect(in, "exit")
	for _, fd := range fds {
		unix.Close(fd)
	}
	return err
}

// runClient opens spec.Count connections as fast as it can (internal/connstorm: non-blocking
// connect(2) on one epoll instance, no Go poller), writing a 1-byte request on each and timing each
// connect and the server's first byte.
func runClient(spec childSpec, in *bufio.Scanner, out *json.Encoder) error {
	opt := spec.Opt
	ap, err := netip.ParseAddrPort(spec.Addr)
	if err != nil {
		return err
	}
	if err := out.Encode(struct{ Ready bool }{true}); err != nil {
		return err
	}
	if err := expect(in, "go"); err != nil {
		return err
	}
	res, err := connstorm.Run(connstorm.Spec{Target: ap, Count: spec.Count, Window: opt.Window,
		Request: []byte{0xda}, AnswerLen: 1, ConnectTimeout: opt.ConnectTimeout, AnswerTimeout: opt.FirstByteWait})
	if err != nil {
		return err
	}
	rep := clientReport{Succeeded: res.Answered, Errors: res.Failures, Connect: res.Connect, FirstByte: res.First,
		Opening: res.Settled}
	if err := out.Encode(rep); err != nil {
		return err
	}
	err = expect(in, "exit")
	connstorm.CloseAll(res.FDs)
	return err
}
