package main

import (
	"context"
	"fmt"
	"time"
)

// idleSetup is what an idle run measures: the provider (and so the protocol) and the heartbeat
// periods, each a run of the load tool.
type idleSetup struct {
	name     string // the scenario's name, in logs and run names
	provider string
	periods  []time.Duration
	// profile: the proxies get one more window under the profilers at the last period.
	profile bool
}

var (
	// dubboIdle is scenario 1: Dubbo consumers heartbeating every second and every 30 s.
	dubboIdle = idleSetup{name: "idle", provider: dubboGoProvider, periods: []time.Duration{time.Second, 30 * time.Second}, profile: true}
	// tripleIdle: h2c consumers PINGing after 10 s without traffic, dubbo-go's Triple client's
	// keepalive (x/net's ReadIdleTimeout 10 s), against dubbo-go's Triple provider.
	tripleIdle = idleSetup{name: "triple-idle", provider: dubboGoTriple, periods: []time.Duration{10 * time.Second}}
)

// runIdle is scenario 1: idle consumers heartbeating, against the real dubbo-go provider.
// For each target it starts a fresh provider (and proxy), measures their idle RSS, then runs the
// load tool twice (1 s and 30 s heartbeat periods) and samples CPU, RSS and heartbeat counts over
// a window after the connect phase has settled.
func (s *Suite) runIdle(ctx context.Context) (*IdleResult, error) { return s.idle(ctx, dubboIdle) }

// runTripleIdle is runIdle for Triple: h2c consumers PINGing every 10 s.
func (s *Suite) runTripleIdle(ctx context.Context) (*IdleResult, error) {
	return s.idle(ctx, tripleIdle)
}

func (s *Suite) idle(ctx context.Context, su idleSetup) (*IdleResult, error) {
	o := s.opt
	res := &IdleResult{Provider: su.provider, Conns: o.IdleConns, Settle: o.IdleSettle}
	err := s.eachTarget(ctx, su.name, func(tg string) error {
		rows, err := s.idleTarget(ctx, tg, su)
		if err != nil {
			rows = append(rows, IdleRow{Target: tg, Error: err.Error()})
		}
		res.Rows = append(res.Rows, rows...)
		return err
	})
	return res, err
}

// eachTarget runs one scenario step against every target in order (direct, HAProxy,
// Stormgate). A failed target is logged and recorded by run itself; the series goes on
// unless ctx has ended, whose error it then returns.
func (s *Suite) eachTarget(ctx context.Context, name string, run func(tg string) error) error {
	for _, tg := range targets {
		if err := run(tg); err != nil {
			s.logf("  %s %s: %v", name, tg, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// rowPerTarget runs step for every parameter against every target (eachTarget's order and
// error handling) and collects one row per run; a failed run's row carries its error through
// setErr.
func rowPerTarget[P, R any](ctx context.Context, s *Suite, name string, params []P,
	step func(tg string, p P) (R, error), setErr func(*R, string)) ([]R, error) {
	var rows []R
	for _, p := range params {
		err := s.eachTarget(ctx, name, func(tg string) error {
			row, err := step(tg, p)
			if err != nil {
				setErr(&row, err.Error())
			}
			rows = append(rows, row)
			return err
		})
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func (s *Suite) idleTarget(ctx context.Context, tg string, su idleSetup) ([]IdleRow, error) {
	o := s.opt
	prov, px, stop, err := s.startPair(ctx, su.provider, tg, 0)
	if err != nil {
		return nil, err
	}
	defer stop()
	// The provider's and proxy's floor with no consumer at all (timers, runtime), and their RSS,
	// once what starting them costs is over: sampled from a start, dubbo-go's Triple provider burned
	// 2.0 % of a core, more than the 1.3 % it burned later with 10,000 consumers behind Stormgate.
	if err := sleepCtx(ctx, o.IdleSettle); err != nil {
		return nil, err
	}
	idle0 := s.snapshot(ctx, prov, px, nil)
	if err := sleepCtx(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	idle := s.snapshot(ctx, prov, px, nil)
	floor := between(idle0, idle)

	var rows []IdleRow
	for i, period := range su.periods {
		win := o.IdleWindow1s
		if period > time.Second {
			win = o.IdleWindow30
		}
		// The proxies at the last period get one more window, under the profilers (not in the figures).
		profile := su.profile && (tg == stormgate || tg == haproxy) && i == len(su.periods)-1 && o.IdleProfile > 0
		spec := loadSpec{Protocol: prov.proto, Conns: o.IdleConns, ConnectRate: o.ConnectRate, ConnectTimeout: 10 * time.Second,
			Heartbeat: period, Duration: o.IdleSettle + win + 2*time.Second}
		if profile {
			spec.Duration += o.IdleProfile
		}
		row := IdleRow{Target: tg, Period: period, Command: spec.command("$" + targetVar(tg))}
		h, err := s.startLoad(ctx, fmt.Sprintf("%s-%s-%v", su.name, tg, period), px.addr, "", spec)
		if err != nil {
			return rows, err
		}
		if err := h.waitRun(ctx); err != nil {
			h.proc.Kill()
			return rows, err
		}
		if err := sleepCtx(ctx, o.IdleSettle); err != nil {
			h.proc.Kill()
			return rows, err
		}
		a := s.snapshot(ctx, prov, px, h)
		if err := sleepCtx(ctx, win); err != nil {
			h.proc.Kill()
			return rows, err
		}
		b := s.snapshot(ctx, prov, px, h)
		var finishProfile func()
		if profile {
			if finishProfile, err = s.profileIdleWindow(ctx, px, h, o.IdleProfile); err != nil {
				h.proc.Kill()
				return rows, err
			}
		}
		run, err := h.wait()
		if err != nil {
			return rows, err
		}
		if finishProfile != nil {
			finishProfile()
		}
		w := between(a, b)
		row.Window = w.elapsed.Round(time.Millisecond)
		row.Conns = b.pr.Conns
		row.ProviderCPU, row.ProxyCPU, row.LoadCPU = w.provCores(), w.proxyCores(), w.loadCores()
		row.ProviderRSSMiB, row.ProxyRSSMiB = mib(b.prov.RSSKiB), mib(b.px.RSSKiB)
		row.ProviderIdleCPU, row.ProxyIdleCPU = floor.provCores(), floor.proxyCores()
		if row.Conns > 0 {
			row.ProvKiBPerConn = float64(b.prov.RSSKiB-idle.prov.RSSKiB) / float64(row.Conns)
			if tg != direct {
				row.ProxyKiBPerConn = float64(b.px.RSSKiB-idle.px.RSSKiB) / float64(row.Conns)
			}
		}
		// Consumer heartbeats answered per second, from the load tool's progress lines.
		if dt := b.pr.At.Sub(a.pr.At).Seconds(); dt > 0 {
			row.HBPerSec = float64(b.pr.HBOK-a.pr.HBOK) / dt
		}
		hbWindow := row.HBPerSec * w.elapsed.Seconds()
		switch {
		case tg == stormgate:
			// Exact counts from Stormgate: what it answered itself, and what it sent upstream (its
			// own heartbeats, or PINGs to a Triple provider).
			answered := delta(a.m, b.m, "stormgate_heartbeats_answered_total", `side="downstream"`)
			if prov.proto == protoTriple {
				answered = delta(a.m, b.m, "stormgate_http2_pings_answered_total")
			}
			if answered > 0 {
				hbWindow = answered
			}
			row.ProviderHBPerSec = delta(a.m, b.m, "stormgate_upstream_heartbeats_sent_total") / w.elapsed.Seconds()
		case tg == haproxy && prov.proto == protoTriple:
			// HAProxy's HTTP/2 layer answers PINGs itself; what it sends the provider is not counted.
			row.ProviderHBPerSec = notCounted
		default:
			row.ProviderHBPerSec = row.HBPerSec // every consumer heartbeat is forwarded
		}
		if tg != direct {
			row.ProxyUsPerHB = perOp(a.px, b.px, hbWindow)
		}
		// Per consumer heartbeat, whoever answered it: the provider's whole CPU over the window.
		row.ProviderUsPerHB = perOp(a.prov, b.prov, hbWindow)
		r := run.Result
		row.HBFailed = r.HeartbeatsTimedOut + r.HeartbeatsLost
		row.ConnectFailures = r.ConnectFailures.Total()
		s.logf("  %s %s period %v: conns %d, provider %.3f cores, proxy %.3f cores, %.0f hb/s, %.1f hb/s to provider, proxy %.1f KiB/conn",
			su.name, tg, period, row.Conns, row.ProviderCPU, row.ProxyCPU, row.HBPerSec, row.ProviderHBPerSec, row.ProxyKiBPerConn)
		rows = append(rows, row)
		if !px.alive() {
			return rows, fmt.Errorf("%s died during the run", tg)
		}
	}
	return rows, nil
}

// targetVar names a target's address in the commands the doc prints.
func targetVar(tg string) string {
	switch tg {
	case direct:
		return "PROVIDER"
	case haproxy:
		return "HAPROXY"
	case stormgate:
		return "STORMGATE"
	case stormgateNoLabels:
		return "STORMGATE_NOLABELS"
	case stormgateBase:
		return "STORMGATE_BASE"
	case hbFloor, fwdFloor:
		return "FLOOR"
	case npFloor, npFwd:
		return "NETPOLL_FLOOR"
	}
	return "BASELINE"
}
