package admission

import (
	"net"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkAcceptDrain compares ways to drain a full kernel accept queue into raw fds that
// are not in Go's poller (what the proxy's netpoll needs):
//   - rawconn: accept4 in a loop inside the listener's RawConn.Read until EAGAIN (the Admitter's way);
//   - blocking: a locked OS thread calling accept4 on a blocking listener;
//   - gonet: net.Listener.Accept, then (*TCPConn).File for a raw fd (poller add/remove + dup).
//
// Each iteration fills the queue with `queued` handshakes, then times draining it. CPU time
// (getrusage) is the figure to compare on a shared machine; wall time includes waiting for a core.
func BenchmarkAcceptDrain(b *testing.B) {
	const queued = 1000
	for _, m := range []struct {
		name  string
		drain func(b *testing.B, fd int, n int) (closeAll func())
	}{
		{"rawconn", drainRawConn},
		{"blocking", drainBlocking},
		{"gonet", drainGoNet},
	} {
		b.Run(m.name, func(b *testing.B) {
			var wall, cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				fd, addr := benchListener(b, queued*2)
				clients := fill(b, addr, queued)
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				closeAll := m.drain(b, fd, queued)
				wall += time.Since(start)
				cpu += cpuTime() - cpu0
				b.StopTimer()
				closeAll()
				for _, c := range clients {
					c.Close()
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(wall.Nanoseconds())/float64(b.N*queued), "wall-ns/conn")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*queued), "cpu-ns/conn")
		})
	}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchListener returns a non-blocking listening socket fd on loopback and its address.
func benchListener(b *testing.B, backlog int) (int, string) {
	s, err := newSettings(Config{Address: "127.0.0.1:0", Backlog: backlog})
	if err != nil {
		b.Fatal(err)
	}
	fd, addr, _, err := newListenSocket(s)
	if err != nil {
		b.Fatal(err)
	}
	return fd, addr.String()
}

// fill opens n connections to addr; they complete their handshake into the accept queue.
func fill(b *testing.B, addr string, n int) []net.Conn {
	out := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func closeFDs(fds []int) func() {
	return func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

func drainRawConn(b *testing.B, fd int, n int) func() {
	f := os.NewFile(uintptr(fd), "listener") // registers the non-blocking fd with the poller
	defer f.Close()
	raw, err := f.SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	accepted := make([]int, 0, n)
	err = raw.Read(func(lfd uintptr) bool {
		for len(accepted) < n {
			nfd, _, err := unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				return err != unix.EAGAIN
			}
			accepted = append(accepted, nfd)
		}
		return true
	})
	if err != nil || len(accepted) != n {
		b.Fatalf("accepted %d: %v", len(accepted), err)
	}
	return closeFDs(accepted)
}

func drainBlocking(b *testing.B, fd int, n int) func() {
	defer unix.Close(fd)
	if err := unix.SetNonblock(fd, false); err != nil {
		b.Fatal(err)
	}
	accepted := make([]int, 0, n)
	var aerr error
	var wg sync.WaitGroup
	wg.Go(func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range n {
			nfd, _, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				aerr = err
				return
			}
			accepted = append(accepted, nfd)
		}
	})
	wg.Wait()
	if aerr != nil {
		b.Fatal(aerr)
	}
	return closeFDs(accepted)
}

func drainGoNet(b *testing.B, fd int, n int) func() {
	f := os.NewFile(uintptr(fd), "listener")
	ln, err := net.FileListener(f) // dups
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	files := make([]*os.File, 0, n)
	for range n {
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		cf, err := c.(*net.TCPConn).File()
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		files = append(files, cf)
	}
	return func() {
		for _, f := range files {
			f.Close()
		}
	}
}
