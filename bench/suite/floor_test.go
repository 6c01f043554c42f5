package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// buildFloor compiles bench/floor/NAME.c the way bench/run.sh does.
func buildFloor(t *testing.T, name string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed (bench/run.sh installs it): the floor programs cannot be built")
	}
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("gcc", "-O2", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-Werror", "-o", out,
		filepath.Join("..", "floor", name+".c"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, b)
	}
	return out
}

// runFloor starts a floor program and returns its address and a channel of its stdout lines.
func runFloor(t *testing.T, bin string, args ...string) (string, *exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() { // ends when the process's stdout closes (killed at cleanup)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case l := <-lines:
		m := regexp.MustCompile(`^READY (\d+)$`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("first line %q, want READY <port>", l)
		}
		return "127.0.0.1:" + m[1], cmd, lines
	case <-time.After(30 * time.Second):
		t.Fatal("no READY line within 30 s")
	}
	return "", nil, nil
}

// buildGoFloor builds bench/floor/NAME (a Go program) the way bench/run.sh does.
func buildGoFloor(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "../floor/"+name)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, b)
	}
	return out
}

// The responders (the C one and the one on netpoll's connections) answer every heartbeat in
// what they read with the Java bytes, reassemble a header split across reads, skip bodies (of
// other frames too), and count on SIGUSR1.
func TestHBFloorAnswersJavaBytes(t *testing.T) {
	t.Run("hbfloor", func(t *testing.T) { testHeartbeatResponder(t, buildFloor(t, "hbfloor")) })
	t.Run("npfloor", func(t *testing.T) { testHeartbeatResponder(t, buildGoFloor(t, "npfloor")) })
}

func testHeartbeatResponder(t *testing.T, bin string) {
	addr, cmd, lines := runFloor(t, bin)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var in []byte
	in = dubbo.AppendHeartbeatRequest(in, 0x0102030405060708)
	in = dubbo.AppendRequest(in, 77, true, "svc", "echo", strings.Repeat("x", 300)) // not a heartbeat: skipped
	in = dubbo.AppendHeartbeatRequest(in, -2)
	// In pieces that split the first header and the request's body.
	for _, cut := range [][2]int{{0, 5}, {5, 40}, {40, len(in)}} {
		if _, err := c.Write(in[cut[0]:cut[1]]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	want := "dabb22140102030405060708000000014e" + "dabb2214fffffffffffffffe000000014e"
	got := make([]byte, len(want)/2)
	if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := readFull(c, got); err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != want {
		t.Fatalf("answers %x, want %s", got, want)
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-lines:
		if l != "ANSWERED 2" {
			t.Fatalf("count line %q, want ANSWERED 2", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no count after SIGUSR1")
	}
	// Bad magic closes that connection only.
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("read %d bytes after bad magic, want the connection closed", n)
	}
	b, err := heartbeatAnswer(context.Background(), addr)
	if err != nil || hex.EncodeToString(b) != want[:34] {
		t.Fatalf("a new connection after a bad one: %x, %v", b, err)
	}
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := c.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// The forwarders (the C one and the one on netpoll's connections) multiplex many consumers onto
// their upstream connections with rewritten ids and give every consumer back exactly its own
// answers, with its own ids, byte for byte, including when consumers use the same ids at once.
func TestFwdFloorMultiplexesWithoutMixingAnswers(t *testing.T) {
	t.Run("fwdfloor", func(t *testing.T) { testForwarder(t, buildFloor(t, "fwdfloor")) })
	t.Run("npfwd", func(t *testing.T) { testForwarder(t, buildGoFloor(t, "npfwd")) })
}

func testForwarder(t *testing.T, bin string) {
	prov, err := peer.NewProvider(peer.ProviderConfig{HeartbeatInterval: 50 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var serveWG sync.WaitGroup
	serveWG.Go(func() { _ = prov.Serve(ctx) })
	defer func() { prov.Close(); serveWG.Wait() }()
	addr, _, _ := runFloor(t, bin, "--upstream", prov.Addr(), "--upstream-conns", "3")

	const consumers, calls = 20, 200
	var wg sync.WaitGroup
	errs := make(chan error, consumers*(calls+2)) // room for every failure: no sender blocks
	for i := range consumers {
		wg.Go(func() {
			cl, err := peer.Dial(ctx, addr, 0)
			if err != nil {
				errs <- err
				return
			}
			defer cl.Close()
			var cw sync.WaitGroup
			for j := range calls {
				cw.Go(func() {
					id := int64(j) // every consumer uses the same ids
					arg := fmt.Sprintf("consumer %d call %d %s", i, j, strings.Repeat("p", (i*calls+j)%700))
					cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
					defer ccancel()
					r, err := cl.Call(cctx, id, "org.stormgate.Greeter", "echo", arg)
					switch {
					case err != nil:
						errs <- err
					case r.ID != id || r.Status != dubbo.StatusOK || r.Value != arg:
						errs <- fmt.Errorf("consumer %d call %d: id %d status %d value %.40q", i, j, r.ID, r.Status, r.Value)
					}
				})
			}
			cw.Wait()
			if r, err := cl.Heartbeat(ctx, 1<<40); err != nil || r.Status != dubbo.StatusOK || len(r.Raw) != 17 {
				errs <- fmt.Errorf("heartbeat through the forwarder: %+v, %v", r, err)
			}
			if st := cl.Stats(); st.Unexpected != 0 {
				errs <- fmt.Errorf("consumer %d got %d unexpected answers", i, st.Unexpected)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := prov.Stats(); st.ConnsAccepted != 3 || st.Requests != consumers*calls || st.ResponsesReceived == 0 {
		t.Errorf("provider saw %d connections (want the forwarder's 3), %d requests (want %d), %d answers to its heartbeats (want some)",
			st.ConnsAccepted, st.Requests, consumers*calls, st.ResponsesReceived)
	}
}
