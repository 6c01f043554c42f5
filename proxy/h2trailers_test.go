package proxy

import (
	"bytes"
	"testing"

	"golang.org/x/net/http2"

	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2TrailersAfterTheAnswerAreNoNewCall: a provider may answer before the request has ended (a gRPC
// server returning a status without reading). The consumer may still end its request after that, with
// trailers: they end a stream Stormgate has already answered, and must not be taken for the head of a
// new call, which would open a provider stream with a head that has no :method or :path (a malformed
// request, and a call the consumer never made).
func TestH2TrailersAfterTheAnswerAreNoNewCall(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), ProtoTriple)
	hp := srv.poolList()[0].h2
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
