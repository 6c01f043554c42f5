package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
	"github.com/stormgate/stormgate/proxy/wire"
)

// TestCallStatusNames: the status label's one vocabulary is the Dubbo codec's names, then every gRPC
// code named as gRPC does (OK and UNKNOWN shared), and OTHER; operators' queries and alerts use these
// values, so the whole list is pinned. Names a codec repeats, and more than the counts hold, are refused.
func TestCallStatusNames(t *testing.T) {
	codec := dubbo.Codec{}
	v, err := newStatusVocab(codec.StatusNames(), h2.StatusNames())
	if err != nil {
		t.Fatal(err)
	}
	want := "OK SERIALIZATION_ERROR CLIENT_TIMEOUT SERVER_TIMEOUT CHANNEL_INACTIVE BAD_REQUEST BAD_RESPONSE " +
		"SERVICE_NOT_FOUND SERVICE_ERROR SERVER_ERROR CLIENT_ERROR SERVER_THREADPOOL_EXHAUSTED UNKNOWN " +
		"CANCELLED INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS PERMISSION_DENIED RESOURCE_EXHAUSTED " +
		"FAILED_PRECONDITION ABORTED OUT_OF_RANGE UNIMPLEMENTED INTERNAL UNAVAILABLE DATA_LOSS UNAUTHENTICATED OTHER"
	if got := strings.Join(v.names, " "); got != want {
		t.Errorf("names:\n got %s\nwant %s", got, want)
	}
	for code := range h2.NumGRPCCodes {
		if got := v.name(v.index(statusesH2, h2.StatusIndex(code))); got != h2.GRPCCodeName(code) {
			t.Errorf("gRPC code %d is %q, want %q", code, got, h2.GRPCCodeName(code))
		}
	}
	for _, code := range []int{-1, 17, 1000} {
		if got := v.name(v.index(statusesH2, h2.StatusIndex(code))); got != "OTHER" {
			t.Errorf("gRPC code %d is %q, want OTHER", code, got)
		}
	}
	for i := range codec.StatusNames() {
		if v.index(statusesCodec, i) != i {
			t.Errorf("the codec's status %d is the vocabulary's %d: Outcome's indexes would name the wrong status", i, v.index(statusesCodec, i))
		}
	}
	for why := wire.FailUpstreamLost; why <= wire.FailDeadline; why++ { // the codec's indexes are the vocabulary's
		if got, own := v.name(codec.FailureStatus(why)), codec.StatusNames()[codec.FailureStatus(why)]; got != own {
			t.Errorf("failure %d: %q in the vocabulary, %q in the codec's names", why, got, own)
		}
	}
	if _, err := newStatusVocab([]string{"OK", "BUSY"}, []string{"OK", "BUSY", "OK"}); err == nil {
		t.Error("a repeated name was taken")
	}
	many := make([]string, maxStatuses)
	for i := range many {
		many[i] = fmt.Sprintf("S%d", i)
	}
	if _, err := newStatusVocab(many, h2.StatusNames()); err == nil {
		t.Errorf("%d codec names and gRPC's were taken; the counts hold %d", len(many), maxStatuses)
	}
}
