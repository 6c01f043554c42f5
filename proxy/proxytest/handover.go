package proxytest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/handover"
	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// HandoverChildOptions is what a package's handover child serves beyond Dubbo.
type HandoverChildOptions struct {
	// Setup changes the Config and Options both images serve with (Config(provider) with two provider
	// connections, dubbo.Codec{}): a protocol, the Protocols it serves. Nil: Dubbo alone.
	Setup func(*proxy.Config, *proxy.Options)
	// Compact has the old image write the snapshot in the compact form (Snapshot.SetCompact); else
	// in the form Freeze chose.
	Compact bool
}

// HandoverChild serves the child of a handover test (testkit.StartHandoverChild) when this process is
// one (testkit.HandoverRole is set), and then never returns; else it returns at once. TestMain calls it
// before the tests. The child is the handover as sidecar upgrade does it, at the proxy's level: the old
// image serves a Server on a raw listener, freezes it on SIGUSR1, writes the snapshot into a memfd and
// execs itself (same PID) into the new image, which restores the Server and serves; each says on
// standard output what it is at (StartHandoverChild's lines).
func HandoverChild(o HandoverChildOptions) {
	role := os.Getenv(testkit.HandoverRole)
	if role == "" {
		return
	}
	if err := handoverChildRun(role, o); err != nil {
		fmt.Fprintln(os.Stderr, "handover child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// What the old image hands the new one besides the role: the fds of the snapshot's memfd and of the
// listening socket.
const (
	handoverState    = "HANDOVER_STATE"
	handoverListener = "HANDOVER_LISTENER"
)

func handoverChildRun(role string, o HandoverChildOptions) error {
	cfg := Config(os.Getenv(testkit.HandoverProvider))
	cfg.UpstreamConns = 2
	opts := proxy.Options{Codec: dubbo.Codec{}}
	if o.Setup != nil {
		o.Setup(&cfg, &opts)
	}
	ctx := context.Background()
	var srv *proxy.Server
	var lfd int
	var err error
	start := time.Now()
	if role == "old" {
		if srv, err = proxy.New(cfg, opts); err != nil {
			return err
		}
		if lfd, err = rawListen(); err != nil {
			return err
		}
	} else {
		// The old image's sock_diag watcher (its provider is on loopback) is CLOEXEC:
		// the restored Server opens its own.
		if s, err := testkit.DiagSockets(); err == nil && len(s) > 0 {
			return fmt.Errorf("sock_diag sockets crossed exec: %v", s)
		}
		// Decoding and restoring turn garbage collection off while they run: it must be back as it was.
		debug.SetGCPercent(73)
		state, _ := strconv.Atoi(os.Getenv(handoverState))
		lfd, _ = strconv.Atoi(os.Getenv(handoverListener))
		f := os.NewFile(uintptr(state), "state")
		var sn proxy.Snapshot
		b, err := readAllAt(f)
		if err != nil {
			return err
		}
		if err := sn.UnmarshalBinary(b); err != nil {
			return err
		}
		if srv, err = proxy.Restore(&sn, cfg, opts); err != nil {
			return err
		}
		start = sn.Taken
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	var stopAccept atomic.Bool
	accepting := make(chan struct{})
	go func() {
		defer close(accepting)
		for !stopAccept.Load() {
			fds := []unix.PollFd{{Fd: int32(lfd), Events: unix.POLLIN}}
			if n, _ := unix.Poll(fds, 20); n <= 0 {
				continue
			}
			nfd, sa, err := unix.Accept4(lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			if err != nil {
				continue
			}
			srv.ServeFD(nfd, testkit.PeerAddr(sa), netip.AddrPort{})
		}
	}()
	if role == "new" {
		if gc := debug.SetGCPercent(73); gc != 73 {
			return fmt.Errorf("garbage collection at %d%% after the restore, want 73%% as before it", gc)
		}
		fmt.Printf("restored %v\n", time.Since(start))
		select {} // serves until the test kills it
	}
	sa, _ := unix.Getsockname(lfd)
	fmt.Printf("listening 127.0.0.1:%d\n", sa.(*unix.SockaddrInet4).Port)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	<-sig
	stopAccept.Store(true)
	<-accepting
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	sn, err := srv.Freeze(fctx)
	cancel()
	if err != nil {
		return err
	}
	fmt.Println("frozen " + SnapshotSummary(sn))
	if o.Compact {
		sn.SetCompact(true)
	}
	b, err := sn.MarshalBinary()
	if err != nil {
		return err
	}
	mfd, err := unix.MemfdCreate("stormgate-handover", 0) // no MFD_CLOEXEC: it crosses exec
	if err != nil {
		return err
	}
	if _, err := unix.Pwrite(mfd, b, 0); err != nil {
		return err
	}
	var env []string
	for _, kv := range os.Environ() { // the first of duplicate keys wins in Go: drop the old role
		if !strings.HasPrefix(kv, testkit.HandoverRole+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, testkit.HandoverRole+"=new", handoverState+"="+strconv.Itoa(mfd), handoverListener+"="+strconv.Itoa(lfd))
	return handover.Exec(os.Args[0], os.Args, env, append(sn.FDs(), mfd, lfd)) // as sidecar upgrade does
}

// SnapshotSummary is an account of a snapshot for a test's log: its consumer connections, how many are
// HTTP/2's, and how many HTTP/2 calls they carry waiting.
func SnapshotSummary(sn *proxy.Snapshot) string {
	h2s, waiting := 0, 0
	for _, st := range sn.Sessions {
		if st.H2 != nil {
			h2s++
			waiting += len(st.H2.Calls)
		}
	}
	return fmt.Sprintf("sessions=%d h2=%d waiting=%d", len(sn.Sessions), h2s, waiting)
}

// rawListen is a non-blocking listening socket on 127.0.0.1, which crosses the exec (no CLOEXEC once
// handover.Exec has passed it on).
func rawListen() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return -1, err
	}
	return fd, unix.Listen(fd, 4096)
}

// readAllAt reads the whole of f (the snapshot's memfd) from its start.
func readAllAt(f *os.File) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	b := make([]byte, st.Size)
	_, err := f.ReadAt(b, 0)
	return b, err
}
