package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// cmdBaseline runs the accept-storm baseline: a Dubbo endpoint that behaves like the incident's
// provider under a reconnect storm — an explicit small backlog (Dubbo's 50 in the incident) and an
// accept loop that pauses after every accept (a busy provider's boss thread). Accepted
// connections get heartbeat replies and echo replies at once. It exits on SIGTERM/SIGINT or
// after --life.
func cmdBaseline(args []string) error {
	fs := flag.NewFlagSet("baseline", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:20880", "address to listen on")
	backlog := fs.Int("backlog", 50, "listen(2) backlog")
	delay := fs.Duration("accept-delay", time.Millisecond, "pause after each accept")
	life := fs.Duration("life", 5*time.Minute, "exit after this long")
	_ = fs.Parse(args)

	ln, err := listenBacklog(*listen, *backlog)
	if err != nil {
		return err
	}
	fmt.Printf("{\"addr\":%q}\n", ln.Addr().String())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *life)
	defer cancel()
	return serveBaseline(ctx, ln, *delay)
}

// listenBacklog listens on addr with an explicit backlog (net.Listen always uses somaxconn).
func listenBacklog(addr string, backlog int) (net.Listener, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("baseline: want an IPv4 ip:port, got %q", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "baseline-listener") // closes fd on every path below
	defer f.Close()
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		return nil, fmt.Errorf("baseline: bind %s: %w", addr, err)
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		return nil, err
	}
	return net.FileListener(f) // dups fd
}

// serveBaseline accepts until ctx ends, pausing delay after each accept, and serves each
// connection from its own goroutine. It closes every connection and waits for them on return.
func serveBaseline(ctx context.Context, ln net.Listener, delay time.Duration) error {
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	stopped, closerDone := make(chan struct{}), make(chan struct{})
	go func() { // closes the listener when ctx ends; joined below
		defer close(closerDone)
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		ln.Close()
	}()
	var err error
	for {
		var c net.Conn
		c, err = ln.Accept()
		if err != nil {
			break
		}
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			serveDubbo(c)
			mu.Lock()
			delete(conns, c)
			mu.Unlock()
		})
		if delay > 0 {
			time.Sleep(delay)
		}
	}
	close(stopped)
	<-closerDone
	mu.Lock()
	for c := range conns {
		c.Close()
	}
	mu.Unlock()
	wg.Wait()
	if ctx.Err() != nil && errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// serveDubbo answers heartbeats and echoes requests' first string argument until the peer closes
// or sends something that is not Dubbo.
func serveDubbo(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 0, 4096)
	var out []byte
	tmp := make([]byte, 4096)
	for {
		n, err := c.Read(tmp)
		if n > 0 {
			buf = append(buf, tmp[:n]...)
			out = out[:0]
			for {
				h, fl, err := dubbo.Split(buf, 1<<20)
				if err != nil {
					return
				}
				if fl == 0 {
					break
				}
				switch h.Kind() {
				case dubbo.KindEventTwoWay:
					out = dubbo.AppendHeartbeatReply(out, h.ID, h.Serial())
				case dubbo.KindRequest:
					_, _, arg, perr := dubbo.ParseRequest(buf[dubbo.HeaderLen:fl])
					if perr != nil {
						out = dubbo.AppendErrorResponse(out, h.ID, h.Serial(), dubbo.StatusBadRequest, perr.Error())
					} else {
						out = dubbo.AppendValueResponse(out, h.ID, h.Serial(), arg)
					}
				}
				buf = buf[:copy(buf, buf[fl:])]
			}
			if len(out) > 0 {
				if _, err := c.Write(out); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}
