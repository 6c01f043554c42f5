// Package floorproto is what the Go floor programs (npfloor, npfwd) share with the C ones: the
// protocol bench/suite drives them by, and the serving loop around a netpoll listener.
package floorproto

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"

	"github.com/cloudwego/netpoll"
	"golang.org/x/sys/unix"
)

// FDSlots is how many per-fd state slots a program needs: its open-file limit (capped at 4 Mi).
func FDSlots() (int, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	return int(min(lim.Cur, 1<<22)), nil
}

// Serve prints "READY <port>" for ln, prints "ANSWERED <n>" with answered's count on every SIGUSR1
// (hbfloor's protocol), and serves ln with loop until that fails.
func Serve(loop netpoll.EventLoop, ln netpoll.Listener, answered *atomic.Uint64) error {
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	fmt.Println("READY " + port)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			fmt.Println("ANSWERED " + strconv.FormatUint(answered.Load(), 10))
		}
	}()
	return loop.Serve(ln)
}
