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
	_ = fs.Parse(args)
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
	rep, err := stormClient(ap, *conns, *timeout)
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// stormClient is one client's storm: internal/connstorm with a Dubbo heartbeat as the first request
// and its answer's header checked, every connection kept open until all are settled.
func stormClient(ap netip.AddrPort, n int, timeout time.Duration) (*stormReport, error) {
	res, err := connstorm.Run(connstorm.Spec{Target: ap, Count: n, Request: dubbo.AppendHeartbeatRequest(nil, 1),
		AnswerLen: dubbo.HeaderLen + 1, Check: checkDubboAnswer, Deadline: timeout})
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
