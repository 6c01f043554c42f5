package triple

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// startBothProvider is a provider port serving Dubbo and Triple at once (Dubbo 3's port unification).
func startBothProvider(t *testing.T, ctx context.Context) string {
	t.Helper()
	return startBothProviderAt(t, ctx, "127.0.0.1:0")
}

// startBothProviderAt is startBothProvider listening at addr (a provider that comes back on its port).
func startBothProviderAt(t *testing.T, ctx context.Context, addr string) string {
	t.Helper()
	grpcProv := startGRPCProvider(t)
	dubboProv, err := peer.NewProvider(peer.ProviderConfig{Addr: "127.0.0.1:0"}, zaptest.NewLogger(t).Named("provider"))
	if err != nil {
		t.Fatal(err)
	}
	go dubboProv.Serve(ctx)
	t.Cleanup(func() { dubboProv.Close() })
	return startProtocolMuxAt(t, addr, dubboProv.Addr(), grpcProv.Addr().String())
}

// exported is the registry srv's metrics are registered with (newH2Server gives each Server its own).
func exported(srv *proxy.Server) prometheus.Gatherer {
	v, _ := servers.Load(srv)
	return v.(served).reg
}

// waitSeries waits until the series of name with labels has the value want.
func waitSeries(t *testing.T, srv *proxy.Server, name, labels string, want float64) {
	t.Helper()
	waitFor(t, 10*time.Second, name+"{"+labels+"} = "+strconv.FormatFloat(want, 'g', -1, 64), func() bool {
		return testkit.Series(t, exported(srv), name)[labels] == want
	})
}

// TestConnectionSeriesByProtocol (issue 26 item 6): the consumer and provider connection series carry
// the protocol (dubbo, triple, or unknown for a consumer whose first bytes have not come), every label
// value exists from the start, and the HTTP/2 counters count streams, resets by direction and code,
// and GOAWAYs.
func TestConnectionSeriesByProtocol(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, addr := newH2Server(t, startBothProvider(t, ctx), proxy.ProtoDubbo|proxy.ProtoTriple)

	for _, l := range []string{"protocol=triple,reason=peer_closed", "protocol=unknown,reason=idle_timeout", "protocol=dubbo,reason=bad_magic"} {
		if v, ok := testkit.Series(t, exported(srv), "stormgate_downstream_closed_total")[l]; !ok || v != 0 {
			t.Errorf("stormgate_downstream_closed_total{%s} = %v (exported: %v), want 0 from the start", l, v, ok)
		}
	}
	for _, l := range []string{"code=CANCEL,direction=received,peer=consumer", "code=OTHER,direction=sent,peer=provider"} {
		if _, ok := testkit.Series(t, exported(srv), "stormgate_http2_resets_total")[l]; !ok {
			t.Errorf("stormgate_http2_resets_total{%s} not exported from the start", l)
		}
	}
	up := testkit.Series(t, exported(srv), "stormgate_upstream_connections")
	if up["protocol=dubbo"] != 2 || up["protocol=triple"] != 2 {
		t.Errorf("stormgate_upstream_connections %v, want 2 of each protocol", up)
	}

	// A Dubbo consumer, a gRPC consumer, a raw HTTP/2 consumer and one that has sent nothing yet.
	dc, err := peer.Dial(ctx, addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	defer ccancel()
	if r, err := dc.Call(cctx, 1, svc, "echo", "dubbo"); err != nil || r.Value != "dubbo" {
		t.Fatalf("Dubbo call: %+v %v", r, err)
	}
	cc := testkit.GRPCClient(t, addr)
	if resp, err := echo(cctx, cc, []byte("h2")); err != nil || string(resp) != "h2" {
		t.Fatalf("gRPC call: %q %v", resp, err)
	}
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	raw, fr := h2Handshake(t, addr)
	_ = raw.SetDeadline(time.Now().Add(20 * time.Second))
	waitSeries(t, srv, "stormgate_downstream_connections", "protocol=dubbo", 1)
	waitSeries(t, srv, "stormgate_downstream_connections", "protocol=triple", 2)
	waitSeries(t, srv, "stormgate_downstream_connections", "protocol=unknown", 1)

	// A request whose consumer cancels it before it ends: a reset received from the consumer, and one
	// Stormgate sends the provider.
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: firstBlock(echoHead()), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteRSTStream(1, http2.ErrCodeCancel); err != nil {
		t.Fatal(err)
	}
	waitSeries(t, srv, "stormgate_http2_resets_total", "code=CANCEL,direction=received,peer=consumer", 1)
	waitSeries(t, srv, "stormgate_http2_resets_total", "code=CANCEL,direction=sent,peer=provider", 1)
	waitSeries(t, srv, "stormgate_http2_streams_opened_total", "", 2) // the gRPC call and the cancelled one

	// An HTTP/1 client begins like the HTTP/2 preface ('P'): it is not counted as Triple.
	exchange(t, addr, "POST / HTTP/1.1\r\nHost: x\r\n\r\n")
	waitSeries(t, srv, "stormgate_downstream_closed_total", "protocol=unknown,reason=bad_magic", 1)

	// Stormgate drains: GOAWAY to each HTTP/2 consumer.
	srv.Announce()
	waitSeries(t, srv, "stormgate_http2_goaways_total", "direction=sent,peer=consumer", 2)

	dc.Close()
	cc.Close()
	silent.Close()
	raw.Close()
	waitSeries(t, srv, "stormgate_downstream_closed_total", "protocol=dubbo,reason=peer_closed", 1)
	waitSeries(t, srv, "stormgate_downstream_closed_total", "protocol=triple,reason=peer_closed", 2)
	waitSeries(t, srv, "stormgate_downstream_closed_total", "protocol=unknown,reason=peer_closed", 1)
	for _, p := range []string{"dubbo", "triple", "unknown"} {
		waitSeries(t, srv, "stormgate_downstream_connections", "protocol="+p, 0)
	}
}

// TestH2MeterDoesNotAllocate: moving a connection's counts into the metrics, which runs after every
// HTTP/2 frame read, allocates nothing and adds exactly what changed.
func TestH2MeterDoesNotAllocate(t *testing.T) {
	m, _ := newH2Metrics()
	var hm h2Meter
	var c h2.Counters
	runs := 0
	if n := testing.AllocsPerRun(1000, func() {
		runs++
		c.PingsAnswered++
		c.StreamsOpened++
		c.ResetsSent++
		c.ResetsSentByCode[h2.ErrCodeCancel.Class()]++
		c.GoAwaysReceived++
		hm.sync(&m, h2Consumer, &c)
		hm.sync(&m, h2Consumer, &c) // nothing new: nothing added
	}); n != 0 {
		t.Fatalf("h2Meter.sync allocates %v times per frame", n)
	}
	want := float64(runs)
	if testutilCounter(m.pings) != want || testutilCounter(m.streams) != want ||
		testutilCounter(m.resets[h2Consumer][h2Sent][h2.ErrCodeCancel.Class()]) != want ||
		testutilCounter(m.goAways[h2Consumer][h2Received]) != want || testutilCounter(m.goAways[h2Consumer][h2Sent]) != 0 {
		t.Fatalf("after %d frames: pings %v, streams %v", runs, testutilCounter(m.pings), testutilCounter(m.streams))
	}
}
