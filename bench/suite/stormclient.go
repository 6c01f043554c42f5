package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/loadgen/hist"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// stormReport is one storm client's result; reports of several clients merge exactly.
type stormReport struct {
	Conns     int             `json:"conns"`
	Connected int             `json:"connected"`
	Answered  int             `json:"answered"`
	Failures  map[string]int  `json:"failures"`
	Opening   time.Duration   `json:"opening_ns"` // issuing every connect(2)
	Connect   *hist.Histogram `json:"connect"`    // connect(2) to established
	Answer    *hist.Histogram `json:"answer"`     // established to the heartbeat's answer
	First     *hist.Histogram `json:"first"`      // connect(2) to the heartbeat's answer
}

func newStormReport() *stormReport {
	return &stormReport{Failures: map[string]int{}, Connect: new(hist.Histogram), Answer: new(hist.Histogram), First: new(hist.Histogram)}
}

func (r *stormReport) merge(o *stormReport) {
	r.Conns += o.Conns
	r.Connected += o.Connected
	r.Answered += o.Answered
	for k, v := range o.Failures {
		r.Failures[k] += v
	}
	r.Opening = max(r.Opening, o.Opening)
	r.Connect.Merge(o.Connect)
	r.Answer.Merge(o.Answer)
	r.First.Merge(o.First)
}

// cmdStormClient opens --conns connections at once from one thread (non-blocking connect(2) in a
// loop, one epoll set, no Go poller, so the timestamps are not skewed by goroutine scheduling),
// sends a Dubbo heartbeat on each as soon as it is established, and waits for the answer. It keeps
// every connection open until all are settled, then prints its stormReport as JSON.
func cmdStormClient(args []string) error {
	fs := flag.NewFlagSet("storm-client", flag.ExitOnError)
	target := fs.String("target", "127.0.0.1:20881", "IPv4 ip:port to storm")
	conns := fs.Int("conns", 5000, "connections to open at once")
	startAt := fs.Int64("start-at", 0, "Unix time in ns to start at (several clients start together); 0 = now")
	timeout := fs.Duration("timeout", 20*time.Second, "give up on connections not answered by then")
	_ = fs.Parse(args)
	ap, err := netip.ParseAddrPort(*target)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("storm-client: --target wants an IPv4 ip:port, got %q", *target)
	}
	if *conns < 1 || *conns > 19000 {
		return errors.New("storm-client: --conns out of 1..19000")
	}
	if *startAt > 0 {
		time.Sleep(time.Until(time.Unix(0, *startAt)))
	}
	rep, err := stormClient(ap, *conns, *timeout)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// Per-connection states.
const (
	scConnecting = iota + 1
	scWaiting
	scDone
	scFailed
)

type stormConn struct {
	state      int
	start, est time.Time
	got        int
	reply      [dubbo.HeaderLen + 1]byte
}

func stormClient(ap netip.AddrPort, n int, timeout time.Duration) (*stormReport, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rep := newStormReport()
	rep.Conns = n
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(epfd)
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	byFD := map[int]*stormConn{}
	defer func() {
		for fd := range byFD {
			unix.Close(fd)
		}
	}()
	hb := dubbo.AppendHeartbeatRequest(nil, 1)
	pending := 0
	fail := func(fd int, c *stormConn, kind string) {
		c.state = scFailed
		rep.Failures[kind]++
		pending--
		_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, fd, nil)
	}
	established := func(fd int, c *stormConn, now time.Time) {
		c.est = now
		rep.Connected++
		rep.Connect.Record(now.Sub(c.start))
		if _, err := unix.Write(fd, hb); err != nil {
			fail(fd, c, "write: "+errName(err))
			return
		}
		c.state = scWaiting
		_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)})
	}

	t0 := time.Now()
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			rep.Failures["socket: "+errName(err)]++
			continue
		}
		c := &stormConn{state: scConnecting, start: time.Now()}
		byFD[fd] = c
		pending++
		err = unix.Connect(fd, sa)
		switch {
		case err == nil:
			if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
				return nil, err
			}
			established(fd, c, time.Now())
		case errors.Is(err, unix.EINPROGRESS):
			if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLOUT, Fd: int32(fd)}); err != nil {
				return nil, err
			}
		default:
			fail(fd, c, "connect: "+errName(err))
		}
	}
	rep.Opening = time.Since(t0)

	deadline := t0.Add(timeout)
	events := make([]unix.EpollEvent, 1024)
	buf := make([]byte, 256)
	for pending > 0 && time.Now().Before(deadline) {
		k, err := unix.EpollWait(epfd, events, 100)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return nil, err
		}
		now := time.Now()
		for _, ev := range events[:k] {
			fd := int(ev.Fd)
			c := byFD[fd]
			switch c.state {
			case scConnecting:
				soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
				if err != nil || soerr != 0 {
					if err == nil {
						err = unix.Errno(soerr)
					}
					fail(fd, c, "connect: "+errName(err))
					continue
				}
				established(fd, c, now)
			case scWaiting:
				m, err := unix.Read(fd, buf)
				if err != nil {
					if errors.Is(err, unix.EAGAIN) {
						continue
					}
					fail(fd, c, "read: "+errName(err))
					continue
				}
				if m == 0 {
					fail(fd, c, "closed by peer")
					continue
				}
				c.got += copy(c.reply[min(c.got, len(c.reply)):], buf[:m])
				if c.got >= len(c.reply) {
					if c.reply[0] != dubbo.Magic0 || c.reply[1] != dubbo.Magic1 {
						fail(fd, c, "not a Dubbo answer")
						continue
					}
					c.state = scDone
					rep.Answered++
					rep.Answer.Record(now.Sub(c.est))
					rep.First.Record(now.Sub(c.start))
					pending--
					_ = unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, fd, nil)
				}
			}
		}
	}
	for _, c := range byFD {
		switch c.state {
		case scConnecting:
			rep.Failures["connect: timeout"]++
		case scWaiting:
			rep.Failures["answer: timeout"]++
		}
	}
	return rep, nil
}

func errName(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		if name := unix.ErrnoName(e); name != "" {
			return name
		}
	}
	return err.Error()
}
