package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// `run --pollers N` sets how many netpoll pollers run the data plane; the startup
// line says how many there are, so an operator can check what a flag or a default
// gave them. One poller must still serve many consumers concurrently, each getting
// exactly its own answer.
func TestPollersFlag(t *testing.T) {
	prov := startProvider(t, "")

	def := startSidecarArgs(t, prov.addr, 4)
	if os.Getenv("GOMAXPROCS") == "" {
		if got := startedPollers(t, def); got != runtime.GOMAXPROCS(0) {
			t.Errorf("default: %d pollers; want one per core (%d)", got, runtime.GOMAXPROCS(0))
		}
	}

	one := startSidecarArgs(t, prov.addr, 4, "--pollers", "1")
	if got := startedPollers(t, one); got != 1 {
		t.Fatalf("--pollers 1: %d pollers", got)
	}
	fl := dialFleet(t, one.listen, 64, false)
	var wg sync.WaitGroup
	errs := make(chan error, len(fl.conns)*10)
	for i, c := range fl.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				body := fmt.Sprintf("consumer %d call %d", i, j)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := c.c.Call(ctx, int64(1000*i+j), service, "echo", body)
				cancel()
				if err != nil || resp.Status != 20 || resp.Value != body {
					errs <- fmt.Errorf("%s: status %d value %q err %v", body, resp.Status, resp.Value, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A --pollers value out of range is refused before anything is bound, naming the
// flag and what it takes.
func TestPollersFlagRefusesOutOfRange(t *testing.T) {
	for _, v := range []string{"-1", "257"} {
		p := startProc(t, "sidecar", bins.sidecar, "run", "--pollers", v, "--listen", "127.0.0.1:0",
			"--upstream", "127.0.0.1:1", "--metrics", "", "--admin", "")
		if code := p.wait(t, 20*time.Second); code == 0 {
			t.Fatalf("--pollers %s: exit status 0", v)
		}
		if out := strings.Join(append(p.logLines(), p.stdoutLines()...), "\n"); !strings.Contains(out, "--pollers "+v+": want 0 (one per core, the default) or 1 to 256") {
			t.Errorf("--pollers %s: output does not say what the flag takes:\n%s", v, out)
		}
	}
}

// startedPollers reads the pollers field of the sidecar's "stormgate started" line.
func startedPollers(t *testing.T, s *sidecar) int {
	t.Helper()
	lines := s.jsonLines("stormgate started")
	if len(lines) != 1 {
		t.Fatalf("%d \"stormgate started\" lines", len(lines))
	}
	n, ok := lines[0]["pollers"].(float64)
	if !ok {
		t.Fatalf("the startup line has no pollers field: %v", lines[0])
	}
	return int(n)
}
