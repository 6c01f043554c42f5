// Package connstorm is the client side of an accept storm: many TCP connections opened at once, as
// consumers reconnecting to a restarted provider open them. It is the one storm client of the tree:
// admission/storm's client children (make storm, TestAcceptanceStorm) and bench/suite's storm-client
// (make bench, the storm scenario) both run Run.
//
// Run opens the connections with non-blocking connect(2) on an epoll instance of its own (no Go
// poller, so goroutine scheduling does not skew the timestamps; the caller's goroutine is locked to
// its thread while it runs), writes Spec.Request on each as soon as it is established (as a Dubbo
// consumer sends its first request at once; it also matters to the kernel: after an accept-queue
// overflow a silent client would sit on a connection the server never got, while data is
// retransmitted until the server has it), and waits for Spec.AnswerLen bytes of the server's answer.
// It times each connect, each answer and the whole storm.
//
// Every connection stays open until the storm is settled (answered, failed or out of time), so that
// the server sees the storm whole; then the answered ones are handed to the caller (Result.FDs) and
// the rest are closed.
package connstorm

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Spec is one storm from one client.
type Spec struct {
	Target netip.AddrPort // IPv4
	Count  int            // connections to open
	// Window bounds the connects in flight (issued, not yet established or failed); 0: no bound,
	// every connect(2) is issued as fast as the client can.
	Window int
	// Request is written on each connection as soon as it is established (at least one byte).
	Request []byte
	// AnswerLen is how many bytes of the server's answer settle a connection (at least 1).
	AnswerLen int
	// Check, if set, judges the answer's first AnswerLen bytes: "" when it is right, else the
	// failure's name (counted as "answer: " + name).
	Check func(answer []byte) string
	// Settled, if set instead of Check, is asked after every read whether what came so far
	// settles the connection (an answer of no fixed length: HTTP/2 frames until a PING's ack):
	// done, or a failure's name; AnswerLen is then the most it may take (more fails as
	// "answer: too long").
	Settled func(answer []byte) (done bool, why string)
	// ConnectTimeout and AnswerTimeout bound each connection from its connect(2): established within
	// ConnectTimeout, answered within AnswerTimeout (0: no bound of that kind). Deadline bounds the
	// whole storm from its start (0: none). At least one of AnswerTimeout and Deadline must be set.
	ConnectTimeout, AnswerTimeout, Deadline time.Duration
}

// Result is what one storm measured. Times are per connection, in the order they happened.
type Result struct {
	Connected int // established
	Answered  int // answered with AnswerLen bytes that passed Check
	// Failures by kind: "socket: E", "connect: E", "connect: timeout", "connect: not issued by the
	// deadline", "request: E", "answer: E",
	// "answer: closed by peer", "answer: timeout", "answer: <Check's name>" (E an errno's name).
	// Kinds that start with "socket" or "connect" never had a connection.
	Failures map[string]int
	Connect  []time.Duration // connect(2) to established
	Answer   []time.Duration // established to answered
	First    []time.Duration // connect(2) to answered
	Issued   time.Duration   // from the start until every connect(2) had been issued
	Settled  time.Duration   // from the start until the last connect was established or failed
	// FDs are the answered connections, still open: the caller owns them (CloseAll).
	FDs []int
}

// Failure kinds that Run names itself.
const (
	KindConnectTimeout = "connect: timeout"
	KindAnswerTimeout  = "answer: timeout"
	KindAnswerClosed   = "answer: closed by peer"
	KindNotIssued      = "connect: not issued by the deadline" // Window and Deadline both set
)

type phase uint8

const (
	phaseConnecting phase = iota + 1
	phaseAnswering
	phaseDone
	phaseFailed
)

type conn struct {
	fd         int
	phase      phase
	start, est time.Time
	got        int
	answer     []byte // what came of the answer, when Spec.Check reads it
}

// Run runs one storm. It returns an error only when the storm could not be run at all (a bad Spec,
// no epoll instance); what happened to the connections is in the Result.
func Run(spec Spec) (*Result, error) {
	if !spec.Target.Addr().Is4() {
		return nil, fmt.Errorf("connstorm: target %v is not IPv4", spec.Target)
	}
	if spec.Count < 1 || len(spec.Request) == 0 || spec.AnswerLen < 1 || (spec.AnswerTimeout <= 0 && spec.Deadline <= 0) {
		return nil, errors.New("connstorm: Count, Request, AnswerLen and AnswerTimeout or Deadline are required")
	}
	runtime.LockOSThread() // the loop is all system calls; keep it on one thread
	defer runtime.UnlockOSThread()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ep)
	r := &run{spec: spec, ep: ep, conns: make([]conn, spec.Count), res: &Result{Failures: map[string]int{}}}
	r.loop()
	return r.res, nil
}

// CloseAll closes fds (Result.FDs).
func CloseAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

type run struct {
	spec  Spec
	ep    int
	conns []conn
	res   *Result

	begin, lastSettle time.Time
	launched          int // connect(2)s issued (or failed to issue)
	connecting        int // issued, not yet established or failed
	unsettled         int // neither answered nor failed
}

func (r *run) loop() {
	sa := &unix.SockaddrInet4{Port: int(r.spec.Target.Port()), Addr: r.spec.Target.Addr().As4()}
	events := make([]unix.EpollEvent, 1024)
	buf := make([]byte, max(256, r.spec.AnswerLen))
	r.begin = time.Now()
	r.lastSettle = r.begin
	r.unsettled = r.spec.Count
	poll := func(ms int) {
		k, err := unix.EpollWait(r.ep, events, ms)
		if err != nil {
			return // EINTR: the next round looks again
		}
		now := time.Now()
		for _, ev := range events[:k] {
			r.handle(int(ev.Fd), ev.Events, buf, now)
		}
	}
	deadline := time.Time{}
	if r.spec.Deadline > 0 {
		deadline = r.begin.Add(r.spec.Deadline)
	}
	lastSweep := r.begin
	for r.unsettled > 0 {
		for r.launched < r.spec.Count && (r.spec.Window <= 0 || r.connecting < r.spec.Window) {
			r.launch(sa)
			if r.launched%16 == 0 {
				poll(0) // completions are timestamped promptly while connects are still issued
			}
			if r.launched == r.spec.Count {
				r.res.Issued = time.Since(r.begin)
			}
		}
		poll(10)
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			break
		}
		if now.Sub(lastSweep) >= 50*time.Millisecond {
			lastSweep = now
			r.sweep(now)
		}
	}
	// Out of time: what is still open failed by timeout, and what was never issued too.
	r.res.Failures[KindNotIssued] += r.spec.Count - r.launched
	if r.res.Failures[KindNotIssued] == 0 {
		delete(r.res.Failures, KindNotIssued)
	}
	for i := range r.conns[:r.launched] {
		switch r.conns[i].phase {
		case phaseConnecting:
			r.fail(i, KindConnectTimeout)
		case phaseAnswering:
			r.fail(i, KindAnswerTimeout)
		}
	}
	r.res.Settled = r.lastSettle.Sub(r.begin)
	for i := range r.conns[:r.launched] {
		c := &r.conns[i]
		switch {
		case c.phase == phaseDone:
			r.res.FDs = append(r.res.FDs, c.fd)
		case c.fd >= 0:
			unix.Close(c.fd)
		}
	}
}

// launch issues the next connect(2).
func (r *run) launch(sa *unix.SockaddrInet4) {
	i := r.launched
	r.launched++
	c := &r.conns[i]
	c.fd = -1
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		c.phase = phaseConnecting
		r.connecting++
		r.fail(i, "socket: "+errName(err))
		return
	}
	c.fd, c.start, c.phase = fd, time.Now(), phaseConnecting
	r.connecting++
	if err := unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLOUT | unix.EPOLLRDHUP, Fd: int32(i)}); err != nil {
		r.fail(i, "socket: epoll: "+errName(err))
		return
	}
	if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
		r.fail(i, "connect: "+errName(err))
	}
	// Established at once (err == nil) or later: EPOLLOUT reports it either way.
}

func (r *run) handle(i int, events uint32, buf []byte, now time.Time) {
	c := &r.conns[i]
	switch c.phase {
	case phaseConnecting:
		if soErr, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soErr != 0 {
			if err == nil {
				err = unix.Errno(soErr)
			}
			r.fail(i, "connect: "+errName(err))
			return
		}
		if events&unix.EPOLLOUT == 0 {
			return
		}
		c.est, c.phase = now, phaseAnswering
		r.connecting--
		r.lastSettle = now
		r.res.Connected++
		r.res.Connect = append(r.res.Connect, now.Sub(c.start))
		if _, err := unix.Write(c.fd, r.spec.Request); err != nil {
			r.fail(i, "request: "+errName(err))
			return
		}
		// The answer may already be here: level-triggered epoll reports it in the next round.
		_ = unix.EpollCtl(r.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(i)})
	case phaseAnswering:
		want := r.spec.AnswerLen - c.got
		n, err := unix.Read(c.fd, buf[:want])
		switch {
		case errors.Is(err, unix.EAGAIN):
			return
		case err != nil:
			r.fail(i, "answer: "+errName(err))
			return
		case n == 0:
			r.fail(i, KindAnswerClosed)
			return
		}
		if r.spec.Check != nil || r.spec.Settled != nil {
			c.answer = append(c.answer, buf[:n]...)
		}
		c.got += n
		if r.spec.Settled != nil {
			done, why := r.spec.Settled(c.answer)
			switch {
			case why != "":
				r.fail(i, "answer: "+why)
				return
			case !done && c.got >= r.spec.AnswerLen:
				r.fail(i, "answer: too long")
				return
			case !done:
				return
			}
		} else if c.got < r.spec.AnswerLen {
			return
		}
		if r.spec.Check != nil {
			if why := r.spec.Check(c.answer); why != "" {
				r.fail(i, "answer: "+why)
				return
			}
		}
		c.phase = phaseDone
		r.unsettled--
		r.res.Answered++
		r.res.Answer = append(r.res.Answer, now.Sub(c.est))
		r.res.First = append(r.res.First, now.Sub(c.start))
		_ = unix.EpollCtl(r.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	}
}

// sweep fails the connections past their own timeouts.
func (r *run) sweep(now time.Time) {
	for i := range r.conns[:r.launched] {
		c := &r.conns[i]
		switch {
		case c.phase == phaseConnecting && r.spec.ConnectTimeout > 0 && now.Sub(c.start) > r.spec.ConnectTimeout:
			r.fail(i, KindConnectTimeout)
		case c.phase == phaseAnswering && r.spec.AnswerTimeout > 0 && now.Sub(c.start) > r.spec.AnswerTimeout:
			r.fail(i, KindAnswerTimeout)
		}
	}
}

// fail settles connection i as failed. Its socket stays open until the storm ends.
func (r *run) fail(i int, kind string) {
	c := &r.conns[i]
	if c.phase == phaseConnecting {
		r.connecting--
		r.lastSettle = time.Now()
	}
	if c.fd >= 0 {
		_ = unix.EpollCtl(r.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	}
	c.phase = phaseFailed
	r.unsettled--
	r.res.Failures[kind]++
}

// errName names an errno ("ECONNREFUSED"), else the error's text.
func errName(err error) string {
	var e unix.Errno
	if errors.As(err, &e) {
		if name := unix.ErrnoName(e); name != "" {
			return name
		}
	}
	return err.Error()
}
