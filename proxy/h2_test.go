package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// HTTP/2 for the core's tests that serve Triple consumers (the warm-up ramp, the writers): the protocol
// is package proxy/triple's, whose own tests cover HTTP/2 itself. This package cannot import it (it
// imports proxy), so TestMain, in package proxy_test, passes it in (SetTestProtocol, export_test.go).
var testProtocol func(Env) Protocol

// newH2Server starts a Server with HTTP/2 for a provider at upstream speaking protos, and a listener, and
// waits for the provider connections.
func newH2Server(t testing.TB, upstream string, protos Protocols, mods ...func(*Config)) (*Server, string) {
	t.Helper()
	return newH2ServerWith(t, upstream, protos, Options{}, mods...)
}

// newH2ServerWith is newH2Server with the Server's Options (a clock, a registry, a logger: the test's
// when nil).
func newH2ServerWith(t testing.TB, upstream string, protos Protocols, opts Options, mods ...func(*Config)) (*Server, string) {
	t.Helper()
	cfg := testConfig(upstream)
	cfg.Protocols = protos
	cfg.UpstreamConns = 2
	for _, m := range mods {
		m(&cfg)
	}
	opts.Codec, opts.Protocol = dubbo.Codec{}, testProtocol
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t).Named("proxy")
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	srv, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ln := listenRaw(t, srv)
	t.Cleanup(func() { srv.Close(); cancel() })
	waitFor(t, 20*time.Second, "provider connections", func() bool {
		n := 0
		for _, p := range srv.poolList() {
			r, _, _ := p.connStates()
			n += r
		}
		return n == cfg.UpstreamConns*(btoi(protos.Dubbo())+btoi(protos.Triple()))
	})
	return srv, ln.addr
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// echo makes a unary call of msg and returns the answer's message.
func echo(ctx context.Context, cc *grpc.ClientConn, msg []byte) ([]byte, error) {
	var resp []byte
	err := cc.Invoke(ctx, "/org.stormgate.Echo/Echo", &msg, &resp)
	return resp, err
}

// grpcEcho is a grpc-go provider that answers every unary call with its request message.
type grpcEcho struct {
	srv  *grpc.Server
	addr string
}

// startGRPCEcho serves a grpcEcho on addr ("127.0.0.1:0": any port), stopped at the test's end.
func startGRPCEcho(t testing.TB, addr string) *grpcEcho {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.ForceServerCodec(testkit.RawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var msg []byte
		if err := ss.RecvMsg(&msg); err != nil {
			return err
		}
		return ss.SendMsg(&msg)
	}))
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return &grpcEcho{srv: s, addr: ln.Addr().String()}
}
