package interop

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/interop/internal/h2count"
)

// The HTTP/2 peers (issue 26): dubbo-go v3.3.0's Triple provider and consumer, and grpc-go's interop server and
// client, each pair run with an h2count relay in front of the server so the tests see what reaches it
// (connections, PINGs). h2Via puts Stormgate (upstream.protocol triple) between the consumer and the relay;
// testTriplePlainDial and testTripleKeepaliveDirect pin what the peers do without it.

// h2Via starts Stormgate in front of the server behind upstream (the relay in front of it) and returns the
// address an HTTP/2 consumer dials, and the sidecar.
func h2Via(t *testing.T, upstream string) (string, *sidecar) {
	t.Helper()
	_, port, err := net.SplitHostPort(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	sc := startSidecar(t, p, "--upstream-protocol", "triple")
	return sc.listen, sc
}

// checkThroughStormgate fails the test unless the server saw at most upstream.connections connections, all
// HTTP/2, and no PING from a consumer (Stormgate answers them; it sends none of its own yet).
func checkThroughStormgate(t *testing.T, relay *h2count.Relay) {
	t.Helper()
	cs := relay.Counts()
	t.Logf("at the provider: %+v", cs)
	if cs.Conns < 1 || cs.Conns > upstreamConns || cs.BadPreface != 0 {
		t.Errorf("provider connections %d (bad preface %d), want 1..%d (upstream.connections)", cs.Conns, cs.BadPreface, upstreamConns)
	}
	if cs.Pings != 0 {
		t.Errorf("%d PINGs reached the provider, want 0: Stormgate answers its consumers' PINGs", cs.Pings)
	}
}

func TestH2Interop(t *testing.T) {
	t.Run("triple", func(t *testing.T) { t.Parallel(); testTriple(t) })
	t.Run("triple_group_version_labels", func(t *testing.T) { t.Parallel(); testTripleGroupVersionLabels(t) })
	t.Run("triple_keepalive", func(t *testing.T) { t.Parallel(); testTripleKeepalive(t) })
	t.Run("triple_keepalive_direct", func(t *testing.T) { t.Parallel(); testTripleKeepaliveDirect(t) })
	t.Run("triple_plain_dial", func(t *testing.T) { t.Parallel(); testTriplePlainDial(t) })
	t.Run("grpc", func(t *testing.T) { t.Parallel(); testGRPCInterop(t) })
	t.Run("triple_not_found_form", func(t *testing.T) { t.Parallel(); testTripleNotFoundForm(t) })
}

// testTripleNotFoundForm pins the answer Stormgate takes as proof that a Triple call never ran
// (proxy/h2.NotRun, dubbogo_triple_not_found): the real dubbo-go v3.3.0 provider answers a path it does not
// serve (as in its startup window, before the service is exported) with Go's http.NotFound over h2c:
// :status 404, text/plain, nosniff, content-length 19, "404 page not found\n", no grpc-status.
func testTripleNotFoundForm(t *testing.T) {
	prov, _, _ := startTripleProvider(t)
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/org.stormgate.NotExported/Echo", prov.port),
		strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc+hessian2")
	req.Header.Set("Te", "trailers")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s %d %q %q %q %d %q grpc-status=%q", resp.Proto, resp.StatusCode, resp.Header.Get("Content-Type"),
		resp.Header.Get("X-Content-Type-Options"), resp.Header.Get("Content-Length"), resp.ContentLength, body,
		resp.Header.Get("Grpc-Status")+resp.Trailer.Get("Grpc-Status"))
	want := `HTTP/2.0 404 "text/plain; charset=utf-8" "nosniff" "19" 19 "404 page not found\n" grpc-status=""`
	if got != want {
		t.Errorf("dubbo-go's answer for a path it does not serve:\n got %s\nwant %s\n(proxy/h2/notrun.go must follow it)", got, want)
	}
}

// relayTo starts an h2count relay toward addr, closed at the end of the test.
func relayTo(t *testing.T, addr string) *h2count.Relay {
	t.Helper()
	r, err := h2count.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// startTripleProvider starts dgprovider --protocol triple with its request log, and a relay in front of it.
func startTripleProvider(t *testing.T) (*provider, *h2count.Relay, string) {
	t.Helper()
	reqLog := filepath.Join(t.TempDir(), "requests.log")
	prov := startProvider(t, 0, "--protocol", "triple", "--log-requests", reqLog)
	return prov, relayTo(t, fmt.Sprintf("127.0.0.1:%d", prov.port)), reqLog
}

// testTriple: a registry-less hessian2 Triple consumer (client.DialWithInfo) runs the once checks (unary,
// business error, 50 KB argument, 100 ms sleep, 200 concurrent calls); the provider logged every call it ran,
// and Stormgate counted each under its service and method exactly as it counts the Dubbo 2 run's: Fail's
// business error (dubbo-go's grpc-status 17) is OK with an exception there too.
func testTriple(t *testing.T) {
	_, relay, reqLog := startTripleProvider(t)
	addr, sc := h2Via(t, relay.Addr())
	c := startProc(t, "dgconsumer", bins.consumer, "--protocol", "triple", "--addr", addr, "once")
	var s onceSummary
	line := readSummary(t, c, 60*time.Second, &s)
	t.Logf("consumer: %s", line)
	checkOnce(t, s, line)
	c.wait(t, 10*time.Second)
	if code := c.ExitCode(); code != 0 {
		t.Errorf("dgconsumer exited %d", code)
	}
	ran := readRequestLog(t, reqLog)
	want := map[string]int{"Echo": 201, "Fail": 1, "Big": 1, "Sleep": 1}
	for m, n := range want {
		if ran[m] != n {
			t.Errorf("the provider ran %s %d times, want %d (log: %v)", m, ran[m], n, ran)
		}
	}
	checkThroughStormgate(t, relay)
	checkMethodLabels(t, sc.scrape(t), "org.stormgate.Greeter") // the same series as the Dubbo 2 run's
}

// testTripleGroupVersionLabels: a Triple consumer and provider in a group, with a version: the consumer
// names them in tri-service-group and tri-service-version, and the labels carry Dubbo's service key, as the
// Dubbo 2 run's do (testGroupVersionLabels).
func testTripleGroupVersionLabels(t *testing.T) {
	prov := startProvider(t, 0, "--protocol", "triple", "--group", "canary", "--version", "2.1.0")
	addr, sc := h2Via(t, fmt.Sprintf("127.0.0.1:%d", prov.port))
	c := startProc(t, "dgconsumer", bins.consumer, "--protocol", "triple", "--addr", addr, "--group", "canary", "--version", "2.1.0", "once")
	var s onceSummary
	line := readSummary(t, c, 90*time.Second, &s)
	if !s.OK {
		t.Fatalf("dgconsumer --protocol triple once with a group and version failed: %s", line)
	}
	checkMethodLabels(t, sc.scrape(t), "canary/org.stormgate.Greeter:2.1.0")
}

// testTripleKeepalive: an idle dubbo-go Triple consumer PINGs every 10 s (x/net's ReadIdleTimeout, dubbo-go's
// default keepalive interval); through Stormgate they are answered there and none reaches the provider (issue 26
// acceptance 1: 0 consumer PINGs at the provider).
func testTripleKeepalive(t *testing.T) {
	_, relay, _ := startTripleProvider(t)
	addr, sc := h2Via(t, relay.Addr())
	c := startProc(t, "dgconsumer", bins.consumer, "--protocol", "triple", "--addr", addr, "once", "--hold")
	var s onceSummary
	line := readSummary(t, c, 60*time.Second, &s)
	checkOnce(t, s, line)
	sc.waitMetric(t, 25*time.Second, "stormgate_http2_pings_answered_total", func(v float64) bool { return v > 0 })
	checkThroughStormgate(t, relay)
	closeStdinAndWait(t, c)
}

// testTripleKeepaliveDirect pins the behaviour Stormgate absorbs: without it, the idle consumer's PINGs reach
// the provider.
func testTripleKeepaliveDirect(t *testing.T) {
	_, relay, _ := startTripleProvider(t)
	c := startProc(t, "dgconsumer", bins.consumer, "--protocol", "triple", "--addr", relay.Addr(), "once", "--hold")
	var s onceSummary
	line := readSummary(t, c, 60*time.Second, &s)
	checkOnce(t, s, line)
	deadline := time.Now().Add(25 * time.Second)
	for relay.Counts().Pings == 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	cs := relay.Counts()
	t.Logf("at the provider after the consumer idled: %+v", cs)
	if cs.Pings == 0 {
		t.Errorf("no consumer PING reached the provider within 25 s of idling; dubbo-go v3.3.0 PINGs after 10 s")
	}
	closeStdinAndWait(t, c)
}

// testTriplePlainDial pins what dubbo-go v3.3.0 does when a non-IDL Triple consumer uses client.Dial (no method
// names): the calls reach the provider but carry no argument it can decode. If a dubbo-go upgrade fixes
// that, this test says so and the Stormgate interop can add the plain-Dial consumer.
func testTriplePlainDial(t *testing.T) {
	_, relay, _ := startTripleProvider(t)
	c := startProc(t, "dgconsumer", bins.consumer, "--protocol", "triple", "--dial", "plain", "--addr", relay.Addr(), "once")
	var s onceSummary
	line := readSummary(t, c, 60*time.Second, &s)
	if s.OK || !strings.Contains(line, "request params len is 0") {
		t.Errorf("client.Dial with non-IDL Triple: %s (expected dubbo-go v3.3.0's \"request params len is 0\")", line)
	}
	c.wait(t, 10*time.Second)
}

// testGRPCInterop: grpc-go's interop client runs every test case against grpc-go's interop server.
func testGRPCInterop(t *testing.T) {
	port := freePort(t)
	srv := startProc(t, "grpcinterop-server", bins.grpc, "server", "--port", strconv.Itoa(port))
	if _, err := srv.waitLine(20*time.Second, func(l string) bool { return l == "READY "+strconv.Itoa(port) }); err != nil {
		t.Fatal(err)
	}
	relay := relayTo(t, fmt.Sprintf("127.0.0.1:%d", port))
	cases := []string{"empty_unary", "large_unary", "client_streaming", "server_streaming", "ping_pong",
		"empty_stream", "cancel_after_begin", "cancel_after_first_response", "timeout_on_sleeping_server",
		"custom_metadata", "status_code_and_message", "special_status_message", "unimplemented_method"}
	addr, _ := h2Via(t, relay.Addr())
	c := startProc(t, "grpcinterop-client", bins.grpc, "client", "--addr", addr,
		"--test_cases", strings.Join(cases, ","))
	for _, tc := range cases {
		if _, err := c.waitLine(30*time.Second, func(l string) bool { return l == "PASS "+tc }); err != nil {
			t.Fatalf("%s: %v", tc, err)
		}
	}
	c.wait(t, 10*time.Second)
	if code := c.ExitCode(); code != 0 {
		t.Errorf("grpc interop client exited %d", code)
	}
	checkThroughStormgate(t, relay)
}

// checkOnce fails the test unless every once check passed.
func checkOnce(t *testing.T, s onceSummary, line string) {
	t.Helper()
	if !s.OK {
		t.Errorf("dgconsumer once failed: %s", line)
	}
	if len(s.Checks) != 5 {
		t.Errorf("%d checks in the summary, want 5", len(s.Checks))
	}
	for _, ch := range s.Checks {
		if !ch.OK {
			t.Errorf("check %s failed: %s", ch.Name, ch.Detail)
		}
	}
}

// readRequestLog counts the provider's --log-requests lines by method.
func readRequestLog(t *testing.T, path string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if m, _, ok := strings.Cut(l, " "); ok {
			n[m]++
		}
	}
	return n
}
