package triple

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2TrailersAfterTheAnswerAreNoNewCall: a provider may answer before the request has ended (a gRPC
// server returning a status without reading). The consumer may still end its request after that, with
// trailers: they end a stream Stormgate has already answered, and must not be taken for the head of a
// new call, which would open a provider stream with a head that has no :method or :path (a malformed
// request, and a call the consumer never made).
func TestH2TrailersAfterTheAnswerAreNoNewCall(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	hp := poolOf(srv)
	_, fr := h2Handshake(t, addr)
	early := echoHead(h2.HeaderField{Name: "x-status", Value: "5"}) // the provider answers NOT_FOUND at once, reading nothing
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: firstBlock(early), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if a := readAnswers(t, fr, 1)[1]; a == nil || a.grpcStatus != "5" {
		t.Fatalf("the early answer: %+v, want grpc-status 5", a)
	}
	// The request goes on after its answer: a message, then trailers ending it.
	if err := fr.WriteData(1, false, grpcFrame([]byte("late"))); err != nil {
		t.Fatal(err)
	}
	trailers := h2.AppendFields(nil, []h2.HeaderField{{Name: "x-request-trailer", Value: "1"}})
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: trailers, EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	// A whole call after them: once it is answered, Stormgate has handled the trailers (frames in order).
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: staticHead(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(3, true, grpcFrame([]byte("next"))); err != nil {
		t.Fatal(err)
	}
	answers := readAnswers(t, fr, 1)
	if a := answers[3]; a == nil || a.grpcStatus != "0" || !bytes.Equal(a.body, grpcFrame([]byte("next"))) {
		t.Fatalf("the next call: %+v, want its own message back and grpc-status 0 (all: %v)", a, answers)
	}
	if n := hp.opened.Load(); n != 2 {
		t.Errorf("%d provider streams opened for 2 calls: the trailers were taken for a new call", n)
	}
}

// TestH2RequestTrailersEndTheRequestOnly: gRPC has no request trailers, and grpc-go's server takes a
// second HEADERS on a stream for an illegal stream id: a connection error, GOAWAY PROTOCOL_ERROR, which
// ended every other consumer's call on that shared provider connection. So Stormgate ends the request
// there and forwards the trailers' END_STREAM alone: the call is answered, and another consumer's call
// in flight on the same connection is not touched. Before, the other call got grpc-status 14 and the
// provider a second connection.
func TestH2RequestTrailersEndTheRequestOnly(t *testing.T) {
	prov := startGRPCProvider(t)
	_, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) { c.UpstreamConns = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow := make(chan error, 1)
	go func() {
		resp, err := echo(ctx, testkit.GRPCClient(t, addr), []byte("the other consumer"), "x-sleep-ms", "300")
		if err == nil && string(resp) != "the other consumer" {
			err = fmt.Errorf("answer %q", resp)
		}
		slow <- err
	}()
	waitFor(t, 10*time.Second, "the other consumer's call at the provider", func() bool { return prov.active.Load() == 1 })
	_, fr := h2Handshake(t, addr)
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: firstBlock(echoHead()), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, grpcFrame([]byte("ended by trailers"))); err != nil {
		t.Fatal(err)
	}
	trailers := h2.AppendFields(nil, []h2.HeaderField{{Name: "x-request-trailer", Value: "1"}})
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: trailers, EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	if a := readAnswers(t, fr, 1)[1]; a == nil || a.grpcStatus != "0" || !bytes.Equal(a.body, grpcFrame([]byte("ended by trailers"))) {
		t.Errorf("the call ended by trailers: %+v, want its message back and grpc-status 0", a)
	}
	if err := <-slow; err != nil {
		t.Errorf("the other consumer's call on the same provider connection: %v", err)
	}
	if n := prov.accepted.Load(); n != 1 {
		t.Errorf("the provider accepted %d connections, want 1 (none lost)", n)
	}
}
