package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Ports inside the storm's namespace (a fresh namespace has nothing else listening).
const (
	stormProviderPort = 20880
	stormTargetPort   = 20881
)

// kernel counters reported for a storm (TcpExt, per namespace).
var stormCounters = []string{"ListenOverflows", "ListenDrops", "TCPSynRetrans", "TCPReqQFullDoCookies", "TCPReqQFullDrop"}

// runStorm is scenario 5: StormConns connections opened at once against the baseline listener,
// HAProxy (backlog and rate-limit sessions) and Stormgate, each alone in a network namespace
// created for the scenario (so the TcpExt counters count only the storm, and somaxconn is set there).
// Stormgate runs first with its shipped admission defaults; HAProxy is then given the same total
// session rate and the same total backlog.
func (s *Suite) runStorm(ctx context.Context) (*StormResult, error) {
	return s.storm(ctx, fastProvider, []string{stormgate, haproxy, baseline}, []string{baseline, haproxy, stormgate})
}

// runTripleStorm is runStorm for Triple: StormConns h2c connections, each sending the client
// preface, SETTINGS and a PING and settled by the PING's ack, at HAProxy (HTTP/2) and Stormgate
// in front of dubbo-go's Triple provider. The baseline listener speaks only Dubbo.
func (s *Suite) runTripleStorm(ctx context.Context) (*StormResult, error) {
	return s.storm(ctx, dubboGoTriple, []string{stormgate, haproxy}, []string{haproxy, stormgate})
}

// storm runs the targets in runOrder (Stormgate first: HAProxy is given its admission rate) in
// front of a provider of provKind, and reports them in rowOrder.
func (s *Suite) storm(ctx context.Context, provKind string, runOrder, rowOrder []string) (*StormResult, error) {
	o := s.opt
	ns, err := createNetns(ctx, fmt.Sprintf("sgbench-%d", os.Getpid()), o.StormSomaxconn)
	if err != nil {
		return nil, err
	}
	defer ns.Remove()
	res := &StormResult{Conns: o.StormConns, Somaxconn: o.StormSomaxconn,
		SynBacklog: ns.sysctl(ctx, "net.ipv4.tcp_max_syn_backlog"), Syncookies: ns.sysctl(ctx, "net.ipv4.tcp_syncookies"),
		AcceptDelay: o.StormAcceptDelay, BaseBacklog: o.StormBacklog, HABacklog: o.StormSomaxconn}
	rows := map[string]StormRow{}
	for _, tg := range runOrder {
		row, err := s.stormTarget(ctx, ns, tg, provKind, res)
		if err != nil {
			s.logf("  storm %s: %v", tg, err)
			row.Error = err.Error()
		}
		row.Target = tg
		rows[tg] = row
		s.cleanup() // nothing of one target may linger into the next
		if ctx.Err() != nil {
			break
		}
	}
	for _, tg := range rowOrder {
		if r, ok := rows[tg]; ok {
			res.Rows = append(res.Rows, r)
		}
	}
	return res, ctx.Err()
}

var admissionLogRe = regexp.MustCompile(`"accept_rate":([\d.]+),"accept_burst":(\d+)`)

func (s *Suite) stormTarget(ctx context.Context, ns *stormNetns, tg, provKind string, res *StormResult) (StormRow, error) {
	o := s.opt
	row := StormRow{Target: tg}
	var pids []int
	switch tg {
	case baseline:
		p, err := s.start(ctx, procSpec{name: "baseline", netns: ns.Name,
			argv: []string{s.bins.self, "baseline", "--listen", fmt.Sprintf("127.0.0.1:%d", stormTargetPort),
				"--backlog", strconv.Itoa(o.StormBacklog), "--accept-delay", o.StormAcceptDelay.String()}})
		if err != nil {
			return row, err
		}
		defer p.Kill()
		if err := waitListening(ctx, p, stormTargetPort, 1); err != nil {
			return row, err
		}
		pids = []int{p.PID}
	default:
		prov, err := s.startProvider(ctx, provKind, stormProviderPort, ns.Name, 0)
		if err != nil {
			return row, err
		}
		defer prov.proc.Kill()
		po := proxyOpts{ns: ns.Name, port: stormTargetPort}
		if tg == haproxy {
			if res.SGRate <= 0 {
				return row, fmt.Errorf("stormgate's admission rate is unknown (its run failed), so HAProxy's cannot match it")
			}
			po.backlog = o.StormSomaxconn / haproxyProcs
			po.rateLimit = int(res.SGRate) / haproxyProcs
			res.HARate = po.rateLimit * haproxyProcs
		} else {
			po.logLevel = "info"
		}
		px, err := s.startProxy(ctx, tg, prov, po)
		if err != nil {
			return row, err
		}
		defer px.stop()
		if tg == stormgate {
			if err := waitFor(ctx, px.procs[0], 5*time.Second, "stormgate's admission log line", func() bool {
				b, _ := os.ReadFile(px.procs[0].LogPath)
				m := admissionLogRe.FindSubmatch(b)
				if m == nil {
					return false
				}
				res.SGRate, _ = strconv.ParseFloat(string(m[1]), 64)
				res.SGBurst, _ = strconv.Atoi(string(m[2]))
				return true
			}); err != nil {
				return row, err
			}
		}
		pids = px.pids()
	}

	// Two client processes, started together at an instant a little ahead, each opening half the
	// connections at once (see cmdStormClient).
	const clients = 2
	startAt := time.Now().Add(time.Second).UnixNano()
	target := fmt.Sprintf("127.0.0.1:%d", stormTargetPort)
	proto := protoDubbo
	if provKind == dubboGoTriple {
		proto = protoTriple
	}
	row.Command = fmt.Sprintf("ip netns exec $NS suite storm-client --protocol %s --target $%s --conns %d --timeout 20s   # ×%d, started together",
		proto, targetVar(tg), o.StormConns/clients, clients)
	before, err := netstat(pids[0])
	if err != nil {
		return row, err
	}
	var mu sync.Mutex
	reports := make([]*stormReport, 0, clients)
	var procs []*Proc
	for i := range clients {
		n := o.StormConns / clients
		if i == 0 {
			n += o.StormConns % clients
		}
		p, err := s.start(ctx, procSpec{name: fmt.Sprintf("storm-client%d-%s", i, tg), netns: ns.Name, bound: time.Minute,
			argv: []string{s.bins.self, "storm-client", "--protocol", proto, "--target", target, "--conns", strconv.Itoa(n),
				"--start-at", strconv.FormatInt(startAt, 10), "--timeout", stormTimeout.String()},
			onLine: func(line string) {
				if !strings.HasPrefix(line, "{") {
					return
				}
				r := newStormReport()
				if json.Unmarshal([]byte(line), r) == nil {
					mu.Lock()
					reports = append(reports, r)
					mu.Unlock()
				}
			}})
		if err != nil {
			return row, err
		}
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.Wait(); err != nil {
			return row, fmt.Errorf("%s: %v; see %s", p.Name, err, p.LogPath)
		}
	}
	after, err := netstat(pids[0])
	if err != nil {
		return row, err
	}
	if len(reports) != clients {
		return row, fmt.Errorf("%d of %d storm clients reported", len(reports), clients)
	}
	r := newStormReport()
	for _, x := range reports {
		r.merge(x)
	}
	d := counterDelta(before, after, stormCounters...)
	row.ListenOverflows, row.ListenDrops, row.SynRetrans = d["ListenOverflows"], d["ListenDrops"], d["TCPSynRetrans"]
	row.ReqQFullDoCookies, row.ReqQFullDrop = d["TCPReqQFullDoCookies"], d["TCPReqQFullDrop"]
	row.Opened, row.HBAnswered = uint64(r.Connected), uint64(r.Answered)
	for k, v := range r.Failures {
		if strings.HasPrefix(k, "connect") || strings.HasPrefix(k, "socket") {
			row.ConnectFailures += uint64(v)
		} else {
			row.HBFailed += uint64(v)
		}
	}
	row.Failures = r.Failures
	row.OpeningMs = ms(r.Opening)
	// First-answer quantiles over all the connections, the unanswered ones counting as slower than
	// any answer: the answered ones' quantile q·conns/answered. Past the answered ones the quantile
	// is "never" (the report checks the counts); the client timeout stands in for it.
	first := func(q float64) float64 {
		if r.Answered == 0 {
			return ms(stormTimeout)
		}
		qq := q * float64(r.Conns) / float64(r.Answered)
		if qq > 1 {
			return ms(stormTimeout)
		}
		return ms(r.First.Percentile(qq))
	}
	row.FirstP50ms, row.FirstP99ms, row.FirstMaxMs = first(0.5), first(0.99), ms(r.First.Max())
	row.ConnectP99ms, row.AnswerP99ms = ms(r.Connect.Percentile(0.99)), ms(r.Answer.Percentile(0.99))
	s.logf("  storm %s: connected %d, answered %d, failures %v, overflows %d, drops %d, syn retrans %d, first answer p50 %.0fms p99 %.0fms max %.0fms (connect p99 %.0fms, answer after connect p99 %.0fms), connects issued in %.0fms",
		tg, r.Connected, r.Answered, r.Failures, row.ListenOverflows, row.ListenDrops, row.SynRetrans, row.FirstP50ms, row.FirstP99ms, row.FirstMaxMs,
		row.ConnectP99ms, row.AnswerP99ms, row.OpeningMs)
	return row, nil
}

// stormTimeout is how long a storm client waits for its connections' answers.
const stormTimeout = 20 * time.Second
