package admission

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"
)

// recorder is a Handler that keeps every admitted Conn, in admission order, and their fds
// open until the test ends.
type recorder struct {
	t     *testing.T
	mu    sync.Mutex
	conns []Conn
	ch    chan Conn
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{t: t, ch: make(chan Conn, 100000)}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			if c.FD >= 0 {
				unix.Close(c.FD)
			}
		}
	})
	return r
}

func (r *recorder) ServeConn(c Conn) {
	r.mu.Lock()
	r.conns = append(r.conns, c)
	r.mu.Unlock()
	r.ch <- c
}

// close closes an admitted fd early (the recorder would close it at the end).
func (r *recorder) close(fd int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.conns {
		if r.conns[i].FD == fd {
			unix.Close(fd)
			r.conns[i].FD = -1
			return
		}
	}
	r.t.Fatalf("fd %d not admitted", fd)
}

func (r *recorder) snapshot() []Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Conn(nil), r.conns...)
}

// next waits for the next admitted connection.
func (r *recorder) next(d time.Duration) Conn {
	r.t.Helper()
	select {
	case c := <-r.ch:
		return c
	case <-time.After(d):
		r.t.Fatalf("no connection admitted within %v", d)
		return Conn{}
	}
}

// testConfig is a loopback config with pacing off, so tests opt into what they exercise.
func testConfig() Config {
	return Config{Address: "127.0.0.1:0", Backlog: 65535, AcceptBurst: 500, MaxWait: time.Second,
		MaxConnections: 100000, MaxPending: 10000, TCPNoDelay: true}
}

// serve starts an Admitter with h and stops it when the test ends, checking Serve's result.
func serve(t *testing.T, cfg Config, h Handler) (*Admitter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	a, err := Listen(cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), reg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Serve(context.Background(), h) }()
	t.Cleanup(func() {
		a.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Serve returned %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return a, reg
}

// dial connects from src (an IP on the loopback, "" for any) to a.
func dial(t *testing.T, a *Admitter, src string) *net.TCPConn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", a.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// fdConn wraps a dup of an admitted raw fd in a net.Conn; the recorder keeps owning fd.
func fdConn(t *testing.T, fd int) net.Conn {
	t.Helper()
	d, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(d), "admitted-"+strconv.Itoa(fd))
	c, err := net.FileConn(f) // dups again
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echoOnce checks that bytes flow both ways between a client conn and an admitted fd.
func echoOnce(t *testing.T, client net.Conn, server net.Conn, msg string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	client.SetDeadline(deadline)
	server.SetDeadline(deadline)
	if _, err := client.Write([]byte(msg)); err != nil {
		t.Fatalf("client write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != msg {
		t.Fatalf("server read %q, %v", buf, err)
	}
	if _, err := server.Write(buf); err != nil {
		t.Fatalf("server write: %v", err)
	}
	if _, err := io.ReadFull(client, buf); err != nil || string(buf) != msg {
		t.Fatalf("client read %q, %v", buf, err)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(time.Millisecond)
	}
}

// expectFIN checks that the server closed c with an orderly FIN within d.
func expectFIN(t *testing.T, c net.Conn, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(d))
	var b [1]byte
	n, err := c.Read(b[:])
	if n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("read = %d, %v; want EOF (a FIN, not a RST or a timeout)", n, err)
	}
	return time.Since(start)
}
