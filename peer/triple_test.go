package peer

import (
	"bytes"
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
	p, err := StartTripleEcho(TripleConfig{InitialWindowSize: 16 << 10}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cc, err := grpc.NewClient(p.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
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
