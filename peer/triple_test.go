package peer

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// rawCodec sends []byte messages as they are: the Triple message without its gRPC prefix.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "hessian2" }

// A real gRPC client (grpc-go, its own HTTP/2 transport) calls the Triple echo provider with checked
// bodies, some larger than the provider's windows: every answer is the call's own message with
// status OK, the provider checked each body once, and a body sent twice is recorded as a violation
// and refused.
func TestTripleEchoWithGRPCGo(t *testing.T) {
	p, cc := grpcToEcho(t, TripleConfig{InitialWindowSize: 16 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sizes := []int{1, 16, 1000, 40_000, 200_000}
	for i, n := range sizes {
		msg := AppendTripleBody(nil, uint64(i+1), n)[GRPCPrefixLen:]
		var resp []byte
		if err := cc.Invoke(ctx, "/org.stormgate.Greeter/echo", &msg, &resp); err != nil {
			t.Fatalf("body of %d bytes: %v", n, err)
		}
		if !bytes.Equal(resp, msg) {
			t.Fatalf("body of %d bytes: the answer is not the request's message", n)
		}
	}
	st := p.Stats()
	if st.Requests != uint64(len(sizes)) || st.Checked != uint64(len(sizes)) || st.UniqueKeys != uint64(len(sizes)-1) || st.Violations != 0 {
		t.Fatalf("provider %+v; violations %v", st, p.Violations())
	}

	again := AppendTripleBody(nil, 2, 16)[GRPCPrefixLen:]
	var resp []byte
	if err := cc.Invoke(ctx, "/org.stormgate.Greeter/echo", &again, &resp); status.Code(err) == codes.OK {
		t.Fatal("a body delivered twice was answered")
	}
	if v := p.Violations(); len(v) != 1 || v[0].Kind != "duplicate key" {
		t.Fatalf("violations %v, want one duplicate key", v)
	}
}

// A call carrying TripleAnswerSizeHeader gets the checked body of its own key at the size it asks
// for (a small request, a large answer); a size out of range or a body without a full key is a
// violation and is refused.
func TestTripleEchoAnswerSize(t *testing.T) {
	p, cc := grpcToEcho(t, TripleConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	call := func(key uint64, n int, size string) ([]byte, error) {
		msg := AppendTripleBody(nil, key, n)[GRPCPrefixLen:]
		var resp []byte
		err := cc.Invoke(metadata.AppendToOutgoingContext(ctx, TripleAnswerSizeHeader, size), "/org.stormgate.Greeter/echo", &msg, &resp)
		return resp, err
	}
	resp, err := call(7, 64, "300000")
	if err != nil {
		t.Fatal(err)
	}
	if want := AppendTripleBody(nil, 7, 300_000)[GRPCPrefixLen:]; !bytes.Equal(resp, want) {
		t.Fatalf("answer of %d bytes, want the checked body (7, 300000) in %d", len(resp), len(want))
	}
	for _, c := range []struct {
		key  uint64
		n    int
		size string
	}{{8, 64, "12"}, {9, 64, "lots"}, {10, 64, "9000000"}, {11, 8, "1000"}} {
		if _, err := call(c.key, c.n, c.size); status.Code(err) == codes.OK {
			t.Errorf("a %d-byte body asking for %q was answered", c.n, c.size)
		}
	}
	if st := p.Stats(); st.Requests != 1 || st.Violations != 4 {
		t.Fatalf("provider %+v; violations %v; want 1 answer and 4 violations", st, p.Violations())
	}
}

// grpcToEcho starts a TripleEcho with cfg and a grpc-go client of it; both end with the test.
func grpcToEcho(t *testing.T, cfg TripleConfig) (*TripleEcho, *grpc.ClientConn) {
	t.Helper()
	p, err := StartTripleEcho(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	cc, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return p, cc
}

// Kill ends every connection and refuses new ones, as a provider process that dies; Restart listens on
// the same address again, and keys seen before the kill still count: a body delivered before the kill
// and again after the restart is a violation (a call run twice across a restart). Both kill modes, and
// a call still in flight (Delay) when the provider is killed: its answer never goes out.
func TestTripleEchoKillRestart(t *testing.T) {
	for _, mode := range []KillMode{KillAbort, KillClose} {
		p, cc := grpcToEcho(t, TripleConfig{Kill: mode, Delay: 200 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		call := func(key uint64) error {
			msg := AppendTripleBody(nil, key, 64)[GRPCPrefixLen:]
			var resp []byte
			return cc.Invoke(ctx, "/org.stormgate.Greeter/echo", &msg, &resp)
		}
		if err := call(1); err != nil {
			t.Fatalf("mode %d, before the kill: %v", mode, err)
		}
		inFlight := make(chan error, 1)
		go func() { inFlight <- call(2) }()
		waitUntil(t, func() bool { return p.Stats().Checked == 2 }) // the provider has it, answer delayed
		addr := p.Addr()
		p.Kill()
		if err := <-inFlight; status.Code(err) != codes.Unavailable {
			t.Fatalf("mode %d: the call in flight at the kill got %v, want UNAVAILABLE", mode, err)
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Fatalf("mode %d: a killed provider accepted a connection", mode)
		}
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
		if p.Addr() != addr {
			t.Fatalf("restarted on %s, was %s", p.Addr(), addr)
		}
		next := uint64(100)
		waitUntil(t, func() bool { next++; return call(next) == nil }) // grpc-go redials with backoff
		if err := call(1); status.Code(err) == codes.OK {
			t.Fatalf("mode %d: a body delivered before the kill was answered again after the restart", mode)
		}
		st := p.Stats()
		if v := p.Violations(); st.Restarts != 1 || len(v) != 1 || v[0].Kind != "duplicate key" {
			t.Fatalf("mode %d: %+v, violations %v; want 1 restart and one duplicate key", mode, st, v)
		}
		cancel()
	}
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
	}
}
