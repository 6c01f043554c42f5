package interop

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 27, acceptance 4 with real peers: dubbo-go v3.3.0's Triple consumer (8 callers, calls that stay 20 ms
// in the provider) and provider, and grpc-go's interop client and server, through Stormgate (upstream.protocol
// triple) while it upgrades itself three times (`sidecar upgrade` to its own binary). The consumers' HTTP/2
// connections cross each upgrade at rest (docs/design.md §14.12): none closes, every call is answered (none
// fails or times out, none gets another's answer), none runs twice (the providers log every call they run).
func TestTripleUpgrade(t *testing.T) {
	t.Run("dubbo-go", func(t *testing.T) { testTripleUpgrade(t, dubboGoTriple) })
	t.Run("grpc", func(t *testing.T) { testTripleUpgrade(t, grpcInterop) })
}

func testTripleUpgrade(t *testing.T, peers h2Peers) {
	const rounds, workers = 3, 8
	duration := 10 * time.Second
	reqLog := filepath.Join(t.TempDir(), "requests.log")
	prov := peers.provider(t, 0, reqLog)
	sc := startSidecar(t, prov.port, "--upstream-protocol", "triple")
	binary, err := filepath.Abs(bins.sidecar)
	if err != nil {
		t.Fatal(err)
	}
	before := sc.scrape(t)
	c := peers.consumer(t, sc.listen, duration, workers)
	started := time.Now()
	watch := watchConns(sc.listenPort)
	for round := 1; round <= rounds; round++ {
		time.Sleep(1500 * time.Millisecond)
		out, err := exec.Command(bins.sidecar, "upgrade", "--admin", sc.admin, "--binary", binary).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "upgraded:") {
			t.Fatalf("upgrade %d: %v\n%s", round, err, out)
		}
		t.Logf("upgrade %d, %v into the run: %s", round, time.Since(started).Round(time.Millisecond),
			strings.TrimSpace(string(out)))
	}
	if time.Since(started) > duration-time.Second {
		t.Fatal("the upgrades outlasted the consumer's calls (a slow machine?)")
	}
	s, _ := endRestartRun(t, c, sc, before, watch, duration)
	ran := ranTwice(t, reqLog)
	if s.Timeouts != 0 || s.Mismatches != 0 || len(s.FailedArgs) != 0 || s.OK != s.Sent || s.Sent == 0 {
		t.Errorf("consumer: %d sent, %d ok, %d failed, %d timeouts, %d mismatches: %+v",
			s.Sent, s.OK, len(s.FailedArgs), s.Timeouts, s.Mismatches, s.Failures)
	}
	if len(ran) != s.OK {
		t.Errorf("the providers ran %d calls; the consumer had %d answered", len(ran), s.OK)
	}
	t.Logf("%s, %d upgrades: %d calls, all answered, %d run by the provider", peers.name, rounds, s.Sent, len(ran))
}
