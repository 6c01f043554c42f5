package triple

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// Per-method metrics and the access log for HTTP/2 calls (issue 25 item 5, issue 26 item 6): the
// labels from :path and Triple's group and version headers, the gRPC status names, in the same table
// and series as Dubbo 2's.

const tripleSvc = "org.example.Greeter"

// tripleProvider is an h2c provider that answers as dubbo-go's Triple server does: the paths of the
// service it serves (tripleSvc's SayHello and SayBye) with a gRPC answer: the request's message back
// and grpc-status 0 in trailers, or a trailers-only response with the grpc-status an x-status header
// asks for; any other path with HTTP 404 and a text body (Go's ServeMux, which dubbo-go's server uses).
type tripleProvider struct {
	*killableListener
}

func startTripleProvider(t *testing.T) *tripleProvider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tp := &tripleProvider{killableListener: &killableListener{Listener: ln}}
	mux := http.NewServeMux()
	answer := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("content-type", "application/grpc")
		if code := r.Header.Get("x-status"); code != "" {
			w.Header().Set("grpc-status", code) // before the head: a trailers-only response
			w.Header().Set("grpc-message", "asked for "+code)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("trailer", "grpc-status")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body)
		w.Header().Set("grpc-status", "0")
	}
	mux.HandleFunc("POST /"+tripleSvc+"/SayHello", answer)
	mux.HandleFunc("POST /"+tripleSvc+"/SayBye", answer)
	srv := &http2.Server{}
	go func() {
		for {
			c, err := tp.Accept()
			if err != nil {
				return
			}
			go srv.ServeConn(c, &http2.ServeConnOpts{Handler: mux})
		}
	}()
	t.Cleanup(func() { ln.Close(); tp.kill() })
	return tp
}

// tripleCall is one unary call through Stormgate with x/net's client: path, the message (sent as one
// gRPC message), and extra headers as name/value pairs. It returns the HTTP status, the grpc-status (""
// without one) and the answer's body as it came.
func tripleCall(t *testing.T, tr *http2.Transport, path, msg string, hdr ...string) (int, string, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://stormgate"+path, bytes.NewReader(grpcFrame([]byte(msg))))
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: body: %v", path, err)
	}
	st := resp.Trailer.Get("grpc-status")
	if st == "" {
		st = resp.Header.Get("grpc-status")
	}
	return resp.StatusCode, st, body
}

// newH2MethodsServer is newH2ServerWith that also returns the registry the Server's metrics are on.
func newH2MethodsServer(t *testing.T, upstream string, protos proxy.Protocols, opts proxy.Options, mods ...func(*proxy.Config)) (*proxy.Server, string, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	srv, addr := newH2ServerWith(t, upstream, protos, opts, mods...)
	return srv, addr, reg
}

// TestH2MethodLabels: HTTP/2 calls through Stormgate are counted under their service (Dubbo's service
// key from :path and the tri-service-group / tri-service-version headers), method and gRPC status name:
// OK, a provider's grpc-status error (trailers-only), dubbo-go's business error (grpc-status 17: OK with
// an exception, as Dubbo 2 counts a business exception), the provider's HTTP 404 for a path it does not
// serve (UNIMPLEMENTED, as a gRPC client reports it), a :path that names no call (unknown), and
// Stormgate's own UNAVAILABLE when no provider connection takes a call within hold.timeout (a local
// reply, held). Durations and the access log's lines come with them.
func TestH2MethodLabels(t *testing.T) {
	prov := startTripleProvider(t)
	core, logs := observer.New(zapcore.InfoLevel)
	srv, addr, reg := newH2MethodsServer(t, prov.Addr().String(), proxy.ProtoTriple, proxy.Options{AccessLogger: zap.New(core)},
		func(c *proxy.Config) {
			c.HoldTimeout = 300 * time.Millisecond
			c.AccessLog = proxy.AccessLogConfig{Enabled: true, Failed: true, MaxPerSecond: 100}
		})
	tr := h2cTransport(addr)
	defer tr.CloseIdleConnections()
	hello, bye := "/"+tripleSvc+"/SayHello", "/"+tripleSvc+"/SayBye"
	for i := range 3 {
		msg := fmt.Sprint("hello ", i)
		if code, st, body := tripleCall(t, tr, hello, msg, "tri-service-group", "blue", "tri-service-version", "1.2.0"); code != 200 || st != "0" || !bytes.Equal(body, grpcFrame([]byte(msg))) {
			t.Fatalf("SayHello: %d %q %q", code, st, body)
		}
	}
	for range 2 { // version 0.0.0 is Dubbo's "no version"
		if code, st, _ := tripleCall(t, tr, bye, "bye", "x-status", "5", "tri-service-version", "0.0.0"); code != 200 || st != "5" {
			t.Fatalf("SayBye: %d %q", code, st)
		}
	}
	// dubbo-go's business error: Triple's form of a Dubbo business exception.
	if code, st, _ := tripleCall(t, tr, bye, "biz", "x-status", "17"); code != 200 || st != "17" {
		t.Fatalf("SayBye with a business error: %d %q", code, st)
	}
	if code, st, _ := tripleCall(t, tr, "/"+tripleSvc+"/Missing", "?"); code != 404 || st != "" {
		t.Fatalf("a path the provider does not serve: %d %q", code, st)
	}
	for _, p := range []string{"/nonsense", "/a/b/c", "/" + tripleSvc + "/" + strings.Repeat("m", 300)} {
		if code, _, _ := tripleCall(t, tr, p, "?"); code != 404 {
			t.Fatalf("%s: %d, want the provider's 404", p, code)
		}
	}
	// No provider: the call waits hold.timeout for a stream, then gets Stormgate's UNAVAILABLE.
	prov.Close()
	prov.kill()
	waitFor(t, 10*time.Second, "the provider connections gone", func() bool { return poolOf(srv).readyConns() == 0 })
	if code, st, _ := tripleCall(t, tr, hello, "nobody there"); code != 200 || st != "14" {
		t.Fatalf("a call without a provider: %d %q, want grpc-status 14", code, st)
	}

	req := testkit.Series(t, reg, "stormgate_method_requests_total")
	for k, want := range map[string]float64{
		"method=SayHello,service=blue/" + tripleSvc + ":1.2.0,status=OK": 3,
		"method=SayBye,service=" + tripleSvc + ",status=NOT_FOUND":       2,
		"method=SayBye,service=" + tripleSvc + ",status=OK":              1, // the business error
		"method=Missing,service=" + tripleSvc + ",status=UNIMPLEMENTED":  1,
		"method=unknown,service=unknown,status=UNIMPLEMENTED":            3,
		"method=SayHello,service=" + tripleSvc + ",status=UNAVAILABLE":   1,
	} {
		if got, ok := req[k]; !ok || got != want {
			t.Errorf("requests{%s} = %v (present %v), want %v; all: %v", k, got, ok, want, req)
		}
	}
	if dur := testkit.Series(t, reg, "stormgate_method_request_duration_seconds"); dur["method=SayHello,service=blue/"+tripleSvc+":1.2.0"] != 3 ||
		dur["method=SayBye,service="+tripleSvc] != 3 {
		t.Errorf("duration counts: %v", dur)
	}
	if exc := testkit.Series(t, reg, "stormgate_method_exceptions_total"); exc["method=SayBye,service="+tripleSvc] != 1 ||
		exc["method=SayHello,service=blue/"+tripleSvc+":1.2.0"] != 0 {
		t.Errorf("exceptions: %v", exc)
	}
	if held := testkit.Series(t, reg, "stormgate_method_held_requests_total"); held["kind=held,method=SayHello,service="+tripleSvc] != 1 {
		t.Errorf("held: %v", held)
	}
	if local := testkit.Series(t, reg, "stormgate_method_local_replies_total"); local["method=SayHello,reason=hold_timeout,service="+tripleSvc] != 1 {
		t.Errorf("local replies: %v", local)
	}
	if g := testkit.Series(t, reg, "stormgate_method_labels")[""]; g != 4 {
		t.Errorf("stormgate_method_labels = %v, want 4 (SayHello twice, SayBye, Missing)", g)
	}

	lines := map[string]map[string]any{}
	for _, l := range logs.TakeAll() {
		m := l.ContextMap()
		lines[fmt.Sprint(m["method"], "/", m["status"])] = m
	}
	nf := lines["SayBye/NOT_FOUND"]
	if nf == nil || nf["protocol"] != "triple" || nf["service"] != tripleSvc || nf["answered_by"] != "provider" ||
		nf["request_bytes"] != uint32(len(grpcFrame([]byte("bye")))) || nf["held"] != false || nf["consumer"] == "" {
		t.Errorf("the NOT_FOUND line: %v (all: %v)", nf, lines)
	}
	if ua := lines["SayHello/UNAVAILABLE"]; ua == nil || ua["answered_by"] != "stormgate" || ua["reason"] != "hold_timeout" || ua["held"] != true {
		t.Errorf("the UNAVAILABLE line: %v", ua)
	}
	if biz := lines["SayBye/OK"]; biz == nil || biz["exception"] != true {
		t.Errorf("the business error's line: %v", biz)
	}
	if _, ok := lines["SayHello/OK"]; ok {
		t.Errorf("an OK call was logged with only failed calls selected: %v", lines)
	}
}

// TestH2MethodBound: HTTP/2 pairs share metrics.max_methods with Dubbo's: past it, calls count under
// other, and the overflow counter says how many.
func TestH2MethodBound(t *testing.T) {
	prov := startGRPCProvider(t)
	_, addr, reg := newH2MethodsServer(t, prov.Addr().String(), proxy.ProtoTriple, proxy.Options{}, func(c *proxy.Config) { c.MaxMethods = 2 })
	tr := h2cTransport(addr)
	defer tr.CloseIdleConnections()
	for i := range 5 {
		if code, st, _ := tripleCall(t, tr, "/"+tripleSvc+"/m"+strconv.Itoa(i), "x"); code != 200 || st != "0" {
			t.Fatalf("m%d: %d %q", i, code, st)
		}
	}
	req := testkit.Series(t, reg, "stormgate_method_requests_total")
	if req["method=m0,service="+tripleSvc+",status=OK"] != 1 || req["method=m1,service="+tripleSvc+",status=OK"] != 1 ||
		req["method=other,service=other,status=OK"] != 3 {
		t.Errorf("want m0 1, m1 1, other 3: %v", req)
	}
	if _, ok := req["method=m2,service="+tripleSvc+",status=OK"]; ok {
		t.Errorf("m2 exported past the bound: %v", req)
	}
	if got := testkit.Series(t, reg, "stormgate_method_labels_overflow_total")[""]; got != 3 {
		t.Errorf("overflow = %v, want 3", got)
	}
}

// TestH2MethodOneLabelSpace: a service called over Dubbo 2 and over Triple (upstream.protocol both) is
// one pair in one table: its OK calls of both protocols add up in one series.
func TestH2MethodOneLabelSpace(t *testing.T) {
	grpcProv := startGRPCProvider(t)
	dubboProv, err := peer.NewProvider(peer.ProviderConfig{Addr: "127.0.0.1:0"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go dubboProv.Serve(ctx)
	t.Cleanup(func() { dubboProv.Close() })
	_, addr, reg := newH2MethodsServer(t, startProtocolMux(t, dubboProv.Addr(), grpcProv.Addr().String()), proxy.ProtoDubbo|proxy.ProtoTriple, proxy.Options{})
	dc, err := peer.Dial(ctx, addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if r, err := dc.Call(ctx, 1, svc, "echo", "dubbo"); err != nil || r.Value != "dubbo" {
		t.Fatalf("Dubbo call: %+v %v", r, err)
	}
	tr := h2cTransport(addr)
	defer tr.CloseIdleConnections()
	if code, st, body := tripleCall(t, tr, "/"+svc+"/echo", "triple"); code != 200 || st != "0" || !bytes.Equal(body, grpcFrame([]byte("triple"))) {
		t.Fatalf("Triple call: %d %q %q", code, st, body)
	}
	if got := testkit.Series(t, reg, "stormgate_method_requests_total")["method=echo,service="+svc+",status=OK"]; got != 2 {
		t.Errorf("echo OK = %v, want 2 (one call each way)", got)
	}
	if g := testkit.Series(t, reg, "stormgate_method_labels")[""]; g != 1 {
		t.Errorf("stormgate_method_labels = %v, want 1", g)
	}
}

// TestH2MethodLabelsDoNotAllocate: identifying an HTTP/2 call of a pair seen before and counting its
// end allocates nothing (DESIGN §8: per-method labels on the hot paths, 0 allocs/op).
func TestH2MethodLabelsDoNotAllocate(t *testing.T) {
	// A consumer connection of a Server whose provider is away: its session, idle, counts the calls.
	srv, addr := startH2Server(t, testkit.AwayAddr(t), proxy.ProtoTriple, proxy.Options{})
	nc, _ := h2Handshake(t, addr)
	defer nc.Close()
	waitFor(t, 10*time.Second, "the consumer's session", func() bool { return len(sessionsOf(srv)) == 1 })
	h := sessionsOf(srv)[0]
	h.mu.Lock()
	defer h.mu.Unlock()
	head := []h2.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/" + tripleSvc + "/SayHello"}, {Name: ":authority", Value: "x"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
		{Name: "tri-service-group", Value: "blue"}, {Name: "tri-service-version", Value: "1.2.0"}}
	trailers := []h2.HeaderField{{Name: "grpc-status", Value: "0"}}
	c := &h2Call{sess: h}
	call := func() {
		c.method, c.counted = identifyH2(h.env, head), false
		h.answeredLocked(c, trailers)
	}
	call() // the pair's first call enters it in the table
	if n := testing.AllocsPerRun(1000, call); n != 0 {
		t.Errorf("identifying and counting an HTTP/2 call: %v allocs/op", n)
	}
	if n := testkit.Series(t, exported(srv), "stormgate_method_requests_total")["method=SayHello,service=blue/"+tripleSvc+":1.2.0,status=OK"]; n < 1000 {
		t.Fatalf("the call's series: %v calls, want its labels and at least 1000", n)
	}
}
