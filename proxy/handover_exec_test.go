package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/handover"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// TestHandoverAcrossExec is the handover as an upgrade does it, at the proxy's
// level: a child process (this test binary) runs a Server; on SIGUSR1 it freezes,
// writes the snapshot into a memfd, and execs itself (same PID) into a process that
// restores it and serves. Consumers (here) call all along with unique bodies: every
// call gets exactly its own answer, no consumer connection closes, and the provider
// (here) sees no new connection: its connections moved too.
func TestHandoverAcrossExec(t *testing.T) {
	prov, err := peer.NewProvider(peer.ProviderConfig{Addr: "127.0.0.1:0"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go prov.Serve(ctx)
	defer prov.Close()

	child := startHandoverChild(t, "HANDOVER_PROVIDER="+prov.Addr())
	next := child.next
	addr := next("listening ")

	const consumers = 50
	clients := make([]*peer.Client, consumers)
	for i := range clients {
		c, err := peer.Dial(ctx, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	waitFor(t, 10*time.Second, "provider connections", func() bool { return prov.Stats().ConnsOpen == 2 })
	load := startCalls(t, ctx, clients, 700)
	waitFor(t, 10*time.Second, "calls before the handover", func() bool { return load.calls.Load() >= 2*consumers })
	before := load.calls.Load()
	if err := child.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	took := next("restored ")
	waitFor(t, 10*time.Second, "calls after the handover", func() bool { return load.calls.Load() > before+5*consumers })
	load.finish(t, clients)
	if n := prov.Stats().ConnsAccepted; n != 2 {
		t.Errorf("the provider accepted %d connections; its 2 should have moved", n)
	}
	t.Logf("%d calls; handover %s; longest call %v", load.calls.Load(), took, time.Duration(load.longest.Load()))
}

// handoverChildProc is the child of a handover test: this test binary, serving as the old image.
type handoverChildProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

// startHandoverChild starts the child with env added; it is killed at the test's end.
func startHandoverChild(t *testing.T, env ...string) *handoverChildProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), handoverRole+"=old"), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &handoverChildProc{t: t, cmd: cmd, lines: bufio.NewScanner(out)}
}

// next is the rest of the child's next output line that begins with prefix.
func (c *handoverChildProc) next(prefix string) string {
	for c.lines.Scan() {
		if l := c.lines.Text(); strings.HasPrefix(l, prefix) {
			return strings.TrimPrefix(l, prefix)
		}
	}
	c.t.Fatalf("child: no %q line", prefix)
	return ""
}

const handoverRole = "STORMGATE_TEST_HANDOVER"

// handoverChild runs the child's side of TestHandoverAcrossExec when the role is
// set; it never returns then.
func handoverChild() {
	role := os.Getenv(handoverRole)
	if role == "" {
		return
	}
	if err := handoverChildRun(role); err != nil {
		fmt.Fprintln(os.Stderr, "handover child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func handoverChildRun(role string) error {
	cfg := testConfig(os.Getenv("HANDOVER_PROVIDER"))
	cfg.UpstreamConns = 2
	opts := Options{Codec: dubbo.Codec{}}
	ctx := context.Background()
	var srv *Server
	var lfd int
	var err error
	start := time.Now()
	if role == "old" {
		if srv, err = New(cfg, opts); err != nil {
			return err
		}
		if lfd, err = rawListen(); err != nil {
			return err
		}
	} else {
		// The old image's sock_diag watcher (its provider is on loopback) is CLOEXEC:
		// the restored Server opens its own.
		if s, err := openDiagSockets(); err == nil && len(s) > 0 {
			return fmt.Errorf("sock_diag sockets crossed exec: %v", s)
		}
		// Decoding and restoring turn garbage collection off while they run: it must be back as it was.
		debug.SetGCPercent(73)
		state, _ := strconv.Atoi(os.Getenv("HANDOVER_STATE"))
		lfd, _ = strconv.Atoi(os.Getenv("HANDOVER_LISTENER"))
		f := os.NewFile(uintptr(state), "state")
		var sn Snapshot
		b, err := readAllAt(f)
		if err != nil {
			return err
		}
		if err := sn.UnmarshalBinary(b); err != nil {
			return err
		}
		if srv, err = Restore(&sn, cfg, opts); err != nil {
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
			var remote netip.AddrPort
			if s4, ok := sa.(*unix.SockaddrInet4); ok {
				remote = netip.AddrPortFrom(netip.AddrFrom4(s4.Addr), uint16(s4.Port))
			}
			srv.ServeFD(nfd, remote, netip.AddrPort{})
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
	fmt.Println(snapshotSummary(sn))
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
		if !strings.HasPrefix(kv, handoverRole+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, handoverRole+"=new", "HANDOVER_STATE="+strconv.Itoa(mfd), "HANDOVER_LISTENER="+strconv.Itoa(lfd))
	return handover.Exec(os.Args[0], os.Args, env, append(sn.FDs(), mfd, lfd)) // as sidecar upgrade does
}

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

func readAllAt(f *os.File) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	b := make([]byte, st.Size)
	_, err := f.ReadAt(b, 0)
	return b, err
}

// snapshotSummary is the child's account of a snapshot, for the tests.
func snapshotSummary(sn *Snapshot) string {
	h2s, waiting := 0, 0
	for _, st := range sn.Sessions {
		if st.H2 != nil {
			h2s++
			waiting += len(st.H2.Calls)
		}
	}
	return fmt.Sprintf("frozen sessions=%d h2=%d waiting=%d", len(sn.Sessions), h2s, waiting)
}
