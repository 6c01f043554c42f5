package triple

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
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/proxytest"
)

// TestMain runs the package's tests with netpoll configured as the sidecar configures it (handlers on
// the pollers), so the tests exercise what runs in production, as proxy's do.
func TestMain(m *testing.M) {
	if err := proxy.ConfigureNetpoll(zap.NewNop(), proxy.DefaultNetpollBuffer, 0); err != nil {
		panic(err)
	}
	handoverChild() // TestHandoverAcrossExecTriple's child process: never returns
	os.Exit(m.Run())
}

// The child of TestHandoverAcrossExecTriple: proxy's handover_exec_test.go's, with HTTP/2 passed in. It
// serves a Server (Triple, compact consumers) on a raw listener, freezes it on SIGUSR1, execs itself
// with the snapshot in a memfd and restores it, saying on stdout what it is at.

type handoverChildProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

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

// next is the rest of the child's next line that begins with prefix.
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
	cfg := proxytest.Config(os.Getenv("HANDOVER_PROVIDER"))
	cfg.UpstreamConns = 2
	cfg.Protocols = proxy.ProtoTriple
	opts := proxy.Options{Codec: dubbo.Codec{}, Protocol: New}
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
		if s, err := openDiagSockets(); err == nil && len(s) > 0 {
			return fmt.Errorf("sock_diag sockets crossed exec: %v", s)
		}
		debug.SetGCPercent(73)
		state, _ := strconv.Atoi(os.Getenv("HANDOVER_STATE"))
		lfd, _ = strconv.Atoi(os.Getenv("HANDOVER_LISTENER"))
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
	sn.SetCompact(true) // the Triple run crosses with the compact consumers
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

// openDiagSockets lists this process's sock_diag netlink sockets ("fd -> socket:[inode]").
func openDiagSockets() ([]string, error) {
	b, err := os.ReadFile("/proc/self/net/netlink") // sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
	if err != nil {
		return nil, err
	}
	diag := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 10 && f[1] == strconv.Itoa(unix.NETLINK_SOCK_DIAG) {
			diag["socket:["+f[9]+"]"] = true
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && diag[l] {
			out = append(out, e.Name()+" -> "+l)
		}
	}
	return out, nil
}
