package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/stormgate/stormgate/internal/connstorm"
	"github.com/stormgate/stormgate/loadgen/hist"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
)

// stormReport is one storm client's result; reports of several clients merge exactly.
type stormReport struct {
	Conns     int             `json:"conns"`
	Connected int             `json:"connected"`
	Answered  int             `json:"answered"`
	Failures  map[string]int  `json:"failures"`
	Opening   time.Duration   `json:"opening_ns"` // issuing every connect(2)
	Connect   *hist.Histogram `json:"connect"`    // connect(2) to established
	Answer    *hist.Histogram `json:"answer"`     // established to the heartbeat's answer
	First     *hist.Histogram `json:"first"`      // connect(2) to the heartbeat's answer
}

func newStormReport() *stormReport {
	return &stormReport{Failures: map[string]int{}, Connect: new(hist.Histogram), Answer: new(hist.Histogram), First: new(hist.Histogram)}
}

func (r *stormReport) merge(o *stormReport) {
	r.Conns += o.Conns
	r.Connected += o.Connected
	r.Answered += o.Answered
	for k, v := range o.Failures {
		r.Failures[k] += v
	}
	r.Opening = max(r.Opening, o.Opening)
	r.Connect.Merge(o.Connect)
	r.Answer.Merge(o.Answer)
	r.First.Merge(o.First)
}

// cmdStormClient opens --conns connections at once from one thread (non-blocking connect(2) in a
// loop, one epoll set, no Go poller, so the timestamps are not skewed by goroutine scheduling),
// sends a Dubbo heartbeat on each as soon as it is established, and waits for the answer. It keeps
// every connection open until all are settled, then prints its stormReport as JSON.
func cmdStormClient(args []string) error {
	fs := flag.NewFlagSet("storm-client", flag.ExitOnError)
	target := fs.String("target", "127.0.0.1:20881", "IPv4 ip:port to storm")
	conns := fs.Int("conns", 5000, "connections to open at once")
	startAt := fs.Int64("start-at", 0, "Unix time in ns to start at (several clients start together); 0 = now")
	timeout := fs.Duration("timeout", 20*time.Second, "give up on connections not answered by then")
	proto := fs.String("protocol", protoDubbo, "dubbo: a heartbeat, answered; triple: the h2c preface, SETTINGS and a PING, acked")
	_ = fs.Parse(args)
	if *proto != protoDubbo && *proto != protoTriple {
		return fmt.Errorf("storm-client: --protocol %q: want dubbo or triple", *proto)
	}
	ap, err := netip.ParseAddrPort(*target)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("storm-client: --target wants an IPv4 ip:port, got %q", *target)
	}
	if *conns < 1 || *conns > 19000 {
		return errors.New("storm-client: --conns out of 1..19000")
	}
	if *startAt > 0 {
		time.Sleep(time.Until(time.Unix(0, *startAt)))
	}
	rep, err := stormClient(ap, *conns, *timeout, *proto)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// stormClient is one client's storm: internal/connstorm with a Dubbo heartbeat as the first request
// and its answer's header checked (protoTriple: an h2c client's preface, empty SETTINGS and a PING,
// settled by the PING's ack), every connection kept open until all are settled.
func stormClient(ap netip.AddrPort, n int, timeout time.Duration, proto string) (*stormReport, error) {
	spec := connstorm.Spec{Target: ap, Count: n, Request: dubbo.AppendHeartbeatRequest(nil, 1),
		AnswerLen: dubbo.HeaderLen + 1, Check: checkDubboAnswer, Deadline: timeout}
	if proto == protoTriple {
		spec.Request, spec.AnswerLen, spec.Check, spec.Settled = stormH2Request(), stormH2MaxAnswer, nil, stormH2Settled
	}
	res, err := connstorm.Run(spec)
	if err != nil {
		return nil, err
	}
	defer connstorm.CloseAll(res.FDs)
	rep := newStormReport()
	rep.Conns, rep.Connected, rep.Answered, rep.Failures, rep.Opening = n, res.Connected, res.Answered, res.Failures, res.Issued
	for _, d := range res.Connect {
		rep.Connect.Record(d)
	}
	for i := range res.Answer {
		rep.Answer.Record(res.Answer[i])
		rep.First.Record(res.First[i])
	}
	return rep, nil
}

// checkDubboAnswer is the storm's check of a heartbeat's answer: it starts with Dubbo's magic.
func checkDubboAnswer(a []byte) string {
	if a[0] != dubbo.Magic0 || a[1] != dubbo.Magic1 {
		return "not a Dubbo answer"
	}
	return ""
}

// stormPing is the payload of the storm's PING.
var stormPing = [8]byte{'s', 't', 'o', 'r', 'm', 'p', 'n', 'g'}

// stormH2MaxAnswer bounds what a server may send before it acks the storm's PING: its SETTINGS,
// its ack of the client's, a WINDOW_UPDATE, the PING's ack, with room to spare.
const stormH2MaxAnswer = 1024

// stormH2Request is what an h2c consumer sends first: the preface, its SETTINGS (none changed)
// and, here, a PING, whose ack is the storm's answer.
func stormH2Request() []byte {
	b := append([]byte(nil), h2.ClientPreface...)
	b = h2.AppendSettings(b)
	return h2.AppendPing(b, false, stormPing)
}

// stormH2Settled reads the server's frames so far: done at the ack of the storm's PING, failed
// at a GOAWAY or anything that is not HTTP/2.
func stormH2Settled(a []byte) (bool, string) {
	for len(a) >= h2.FrameHeaderLen {
		h, ok := h2.ParseFrameHeader(a)
		if !ok || h.Length > stormH2MaxAnswer {
			return false, "not HTTP/2"
		}
		if len(a) < h.FrameLen() {
			return false, ""
		}
		payload := a[h2.FrameHeaderLen:h.FrameLen()]
		switch {
		case h.Type == h2.FrameGoAway:
			return false, "GOAWAY"
		case h.Type == h2.FramePing && h.Flags.Has(h2.FlagAck) && string(payload) == string(stormPing[:]):
			return true, ""
		}
		a = a[h.FrameLen():]
	}
	return false, ""
}
