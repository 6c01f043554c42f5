package h2

import (
	"testing"

	"golang.org/x/net/http2"
)

// TestCountersByCode: resets are counted by code class both ways, a code the RFC does not define in
// the one OTHER class (a peer picks its codes: metrics need a bounded set), and every GOAWAY each way.
func TestCountersByCode(t *testing.T) {
	d := serverDriver(t, Config{})
	d.headers(1, false, request("/s/m")...)
	d.must(d.fr.WriteRSTStream(1, http2.ErrCodeCancel))
	d.headers(3, false, request("/s/m")...)
	d.must(d.fr.WriteRSTStream(3, http2.ErrCode(0x1234)))
	d.headers(5, false, request("/s/m")...)
	d.pump()
	d.must(d.c.Reset(5, ErrCodeRefusedStream))
	d.must(d.fr.WriteGoAway(5, http2.ErrCodeNo, nil))
	d.pump()
	d.c.GoAway(ErrCodeNo, "draining")
	c := d.c.Counters()
	if c.ResetsReceivedByCode[ErrCodeCancel.Class()] != 1 || c.ResetsReceivedByCode[NumErrCodeClasses-1] != 1 ||
		c.ResetsSentByCode[ErrCodeRefusedStream.Class()] != 1 || c.ResetsReceived != 2 || c.ResetsSent != 1 {
		t.Fatalf("resets by code: received %v, sent %v", c.ResetsReceivedByCode, c.ResetsSentByCode)
	}
	if c.GoAwaysReceived != 1 || c.GoAwaysSent != 1 {
		t.Fatalf("GOAWAYs received %d, sent %d; want 1, 1", c.GoAwaysReceived, c.GoAwaysSent)
	}
	if ErrCode(0x1234).Class() != NumErrCodeClasses-1 || ErrCodeClassName(NumErrCodeClasses-1) != "OTHER" ||
		ErrCodeClassName(ErrCodeEnhanceYourCalm.Class()) != "ENHANCE_YOUR_CALM" {
		t.Fatal("class names")
	}
}
