package e2e

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestUpgradeEndsLongStreams: `sidecar upgrade` with a Triple call that never ends (a stream whose consumer
// has not finished sending) fails safely, the sidecar serving on with the old binary and the stream open;
// `sidecar upgrade --end-streams` then ends that call with grpc-status 14 naming the upgrade and hands its
// consumer's connection over: the same connection answers a PING and a new call on the new binary.
func TestUpgradeEndsLongStreams(t *testing.T) {
	next := upgradeBinaries(t).next
	prov := startH2Provider(t)
	sc := startSidecar(t, prov.addr(), "upstream: { protocol: triple, connections: 2 }\n", 2)
	a := &attacker{t: t, addr: sc.listen}
	a.handshake()
	_ = a.nc.SetDeadline(time.Now().Add(60 * time.Second))
	a.must(a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.head(), EndHeaders: true}))
	a.must(a.fr.WriteData(1, false, grpcFrame([]byte("a stream that stays open"))))
	if !poll(10*time.Second, func() bool { opened, _, _ := prov.streamCounts(); return opened == 1 }) {
		t.Fatal("the stream did not reach the provider")
	}

	out, code := sc.upgrade(t, nil, next)
	if code == 0 || !strings.Contains(out, "did not come to rest") || !strings.Contains(out, "--end-streams") {
		t.Fatalf("upgrade with a stream open: exit %d, %s; want a failure that names the stream and --end-streams", code, out)
	}
	if v := sc.runningVersion(t); v == versionNext {
		t.Fatalf("the failed upgrade left %s running", v)
	}
	a.wantAlive()

	out, code = sc.upgrade(t, nil, next, "--end-streams")
	if code != 0 {
		t.Fatalf("upgrade --end-streams: exit %d, %s", code, out)
	}
	if v := sc.runningVersion(t); v != versionNext {
		t.Fatalf("running %s after the upgrade, want %s", v, versionNext)
	}
	var trailers []hpack.HeaderField
	for trailers == nil {
		switch f := a.next("the open stream's end").(type) {
		case *http2.HeadersFrame:
			if f.StreamID != 1 || !f.StreamEnded() {
				continue
			}
			fields, err := hpack.NewDecoder(0, nil).DecodeFull(f.HeaderBlockFragment())
			a.must(err)
			trailers = fields
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v %q: the connection should have been handed over", f.ErrCode, f.DebugData())
		case *http2.RSTStreamFrame:
			t.Fatalf("RST_STREAM %v on stream %d, want trailers", f.ErrCode, f.StreamID)
		}
	}
	var status, msg string
	for _, f := range trailers {
		switch f.Name {
		case "grpc-status":
			status = f.Value
		case "grpc-message":
			msg = f.Value
		}
	}
	if status != "14" || !strings.Contains(msg, "upgrade") {
		t.Errorf("the open stream ended with grpc-status %q %q; want 14 naming the upgrade", status, msg)
	}
	a.wantAlive()
	a.request(3, bytes.Repeat([]byte("after"), 10))
	a.wantAnswer(3)
	if !poll(10*time.Second, func() bool { _, _, resets := prov.streamCounts(); return resets >= 1 }) {
		t.Error("the provider's stream was not reset")
	}
	if malformed, _, _, _ := prov.report(); len(malformed) > 0 {
		t.Errorf("the provider saw: %v", malformed)
	}
}
