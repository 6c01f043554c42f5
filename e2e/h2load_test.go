package e2e

import (
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
)

// TestH2LoadThroughSidecar (issue 26 item 6): `stormbench load --protocol triple` through one `sidecar
// run` (upstream.protocol triple, 2 provider connections) in front of the Triple echo provider: 50 h2c
// consumers make unary calls with unique checked bodies up to 64 KiB and PING when idle. Every call is
// answered with its own bytes, every PING is answered by Stormgate, none reaches the provider, and
// the provider sees only Stormgate's 2 connections and no integrity violation.
func TestH2LoadThroughSidecar(t *testing.T) {
	prov, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close() })
	sc := startSidecar(t, prov.Addr(), "upstream: { protocol: triple, connections: 2 }\n", 2)
	load := startLoad(t, nil, "--protocol", "triple", "--target", sc.listen, "--conns", "50",
		"--rate", "100", "--duration", "3s", "--body-min", "16", "--body-max", "65536", "--heartbeat", "100ms")
	res := load.result(t, 60*time.Second)
	t.Logf("load: sent %d ok %d, PINGs sent %d answered %d, p99 %v", res.Sent, res.OK, res.HeartbeatsSent,
		res.HeartbeatsAnswered, res.Latency.P99)
	if res.Sent != 300 || res.OK != res.Sent || res.BodyMismatches != 0 || res.Errors != 0 || res.Timeouts != 0 ||
		res.Lost != 0 || res.Unsent != 0 {
		t.Errorf("sent %d ok %d mismatches %d errors %v timeouts %d lost %d unsent %d; want 300 calls, all ok",
			res.Sent, res.OK, res.BodyMismatches, res.ErrorByStatus, res.Timeouts, res.Lost, res.Unsent)
	}
	if res.ConnsOpened != 50 || res.ConnectFailures.Total() != 0 || res.ProtocolErrors+res.Resets+res.ClosedByPeer != 0 {
		t.Errorf("opened %d, connect failures %d, protocol errors %d, resets %d, closed by peer %d",
			res.ConnsOpened, res.ConnectFailures.Total(), res.ProtocolErrors, res.Resets, res.ClosedByPeer)
	}
	if res.HeartbeatsSent == 0 || res.HeartbeatsAnswered != res.HeartbeatsSent {
		t.Errorf("PINGs sent %d answered %d; want some, all answered", res.HeartbeatsSent, res.HeartbeatsAnswered)
	}
	if n := sc.metric(t, "stormgate_http2_pings_answered_total"); n < float64(res.HeartbeatsSent) {
		t.Errorf("stormgate_http2_pings_answered_total %v < the %d PINGs the consumers sent", n, res.HeartbeatsSent)
	}
	st := prov.Stats()
	t.Logf("provider: %+v", st)
	if st.LoadPings != 0 || st.ConnsAccepted != 2 || st.Requests != res.Sent || st.UniqueKeys != st.Checked {
		t.Errorf("provider: %d consumer PINGs, %d connections, %d calls (%d checked, %d distinct keys); want 0, 2, %d",
			st.LoadPings, st.ConnsAccepted, st.Requests, st.Checked, st.UniqueKeys, res.Sent)
	}
	for _, v := range prov.Violations() {
		t.Errorf("provider: %s", v)
	}
}
