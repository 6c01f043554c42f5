package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// runRestart is scenario 4: the provider is SIGKILLed under load and started again ~1 s later
// (the kill rows), then, in a run of its own, stopped gracefully with SIGTERM as Java Dubbo stops
// (READONLY on every connection, serve until the consumers disconnect or 3 s pass, exit) and
// started again 1 s after it exited (the graceful rows). Consumers reconnect after 1 s when their connection closes
// (as Dubbo consumers do).
func (s *Suite) runRestart(ctx context.Context) (*RestartResult, error) {
	return s.restart(ctx, "restart", fastProvider)
}

// runTripleRestart is runRestart for Triple, against dubbo-go's Triple provider: SIGKILL, then
// SIGTERM, which runs dubbo-go's graceful shutdown (it waits for the calls it is running, sends
// its consumers no GOAWAY and closes their connections). h2c consumers reconnect after 1 s.
func (s *Suite) runTripleRestart(ctx context.Context) (*RestartResult, error) {
	return s.restart(ctx, "triple-restart", dubboGoTriple)
}

// dubboGoStopTime is about how long dubbo-go v3.3.0's graceful shutdown takes under load (see
// interop/cmd/dgprovider).
const dubboGoStopTime = 7 * time.Second

func (s *Suite) restart(ctx context.Context, name, provKind string) (*RestartResult, error) {
	o := s.opt
	res := &RestartResult{Provider: provKind, Conns: o.RestartConns, Rate: o.RestartRate,
		KillAfter: o.RestartKill, Down: o.RestartDown}
	for _, graceful := range []bool{false, true} {
		err := s.eachTarget(ctx, name, func(tg string) error {
			row, err := s.restartTarget(ctx, name, provKind, tg, graceful)
			if err != nil {
				row.Error = err.Error()
			}
			if graceful {
				res.Graceful = append(res.Graceful, row)
			} else {
				res.Rows = append(res.Rows, row)
			}
			return err
		})
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

func (s *Suite) restartTarget(ctx context.Context, scen, provKind, tg string, graceful bool) (RestartRow, error) {
	o := s.opt
	row := RestartRow{Target: tg, InsideAtKill: -1}
	// The fast provider counts the requests it has read and not answered in shared memory, so
	// that after a SIGKILL the suite knows how many it took with it (dubbo-go's cannot).
	inside := filepath.Join(s.out, scen+"-"+tg+"-inside")
	var provArgs []string
	switch {
	case provKind != fastProvider:
	case graceful:
		// Java Dubbo's order: READONLY on every connection, keep serving until the consumers
		// have disconnected (at most 3 s here; Java's dubbo.service.shutdown.wait is 10 s), close.
		provArgs = []string{"--readonly-on-sigterm", "--wait-disconnect", "3s"}
	default:
		provArgs = []string{"--inside-file", inside}
	}
	prov, err := s.startProvider(ctx, provKind, 0, "", 0, provArgs...)
	if err != nil {
		return row, err
	}
	defer func() { prov.proc.Kill() }()
	px, err := s.startProxy(ctx, tg, prov, proxyOpts{})
	if err != nil {
		return row, err
	}
	defer px.stop()

	spec := loadSpec{Protocol: prov.proto, Conns: o.RestartConns, Rate: o.RestartRate, Duration: o.RestartDuration,
		Timeout: o.RestartTimeout, Reconnect: time.Second}
	if prov.proto == protoTriple {
		spec.Method, spec.Arg = tripleMethod, fwdArg
	}
	if provKind == dubboGoTriple && graceful {
		// dubbo-go keeps serving 3 s for its consumers to update and up to 3 s more until no
		// call came for 3 s (never, under this load) before it exits: the load runs on past the
		// restart for as long as with the other providers.
		spec.Duration += dubboGoStopTime
	}
	row.Command = spec.command("$" + targetVar(tg))
	name := scen + "-" + tg
	if graceful {
		name = scen + "-graceful-" + tg
	}
	h, err := s.startLoad(ctx, name, px.addr, "", spec)
	if err != nil {
		return row, err
	}
	if err := h.waitRun(ctx); err != nil {
		h.proc.Kill()
		return row, err
	}
	if err := sleepCtx(ctx, o.RestartKill); err != nil {
		h.proc.Kill()
		return row, err
	}
	m0 := s.snapshot(ctx, nil, px, nil).m
	tKill := time.Now()
	if graceful {
		_ = syscall.Kill(prov.proc.PID, syscall.SIGTERM)
		<-prov.proc.Done()
		row.StopTook = time.Since(tKill).Round(time.Millisecond)
		s.logf("  %s %s: provider stopped gracefully in %v", scen, tg, row.StopTook)
	} else {
		prov.proc.Kill()
		if n, err := readInside(inside); err == nil {
			row.InsideAtKill = n
		}
		s.logf("  %s %s: provider killed with %d requests inside (-1: not counted)", scen, tg, row.InsideAtKill)
	}
	if err := sleepCtx(ctx, o.RestartDown); err != nil {
		h.proc.Kill()
		return row, err
	}
	prov, err = s.startProvider(ctx, provKind, prov.port, "", 0, provArgs...)
	if err != nil {
		h.proc.Kill()
		return row, fmt.Errorf("restarting the provider: %w", err)
	}
	row.DownFor = time.Since(tKill).Round(time.Millisecond)
	s.logf("  %s %s: provider back after %v", scen, tg, row.DownFor)
	run, err := h.wait()
	if err != nil {
		return row, err
	}
	m1 := s.snapshot(ctx, nil, px, nil).m
	r := run.Result
	row.Sent, row.OK, row.Errors = r.Sent, r.OK, r.Errors+r.Exceptions
	row.Timeouts, row.Lost, row.Unsent = r.Timeouts, r.Lost, r.Unsent
	row.Resets, row.ClosedByPeer, row.ConnectFailures = r.Resets, r.ClosedByPeer, r.ConnectFailures.Total()
	row.Reconnects = r.Reconnects
	row.P99ms, row.MaxMs = ms(r.Latency.P99), ms(r.Latency.Max)
	row.Held = delta(m0, m1, "stormgate_hold_outcomes_total", `outcome="sent"`)
	row.Reheld = delta(m0, m1, "stormgate_hold_outcomes_total", `outcome="reheld_unseen"`) +
		delta(m0, m1, "stormgate_hold_outcomes_total", `outcome="reheld_unsent"`) +
		delta(m0, m1, "stormgate_hold_outcomes_total", `outcome="reheld_refused"`) // HTTP/2 only
	row.LocalReplies = delta(m0, m1, "stormgate_local_replies_total")
	row.Points, row.Recovery = okSeries(run.Series, tKill, o.RestartRate)
	s.logf("  %s %s: ok %d/%d, errors %d, timeouts %d, lost %d, unsent %d, resets %d, closed %d, recovery %v, max %.0fms",
		scen, tg, row.OK, row.Sent, row.Errors, row.Timeouts, row.Lost, row.Unsent, row.Resets, row.ClosedByPeer, row.Recovery, row.MaxMs)
	return row, nil
}

// readInside reads the provider's --inside-file: a native-endian int64.
func readInside(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if len(b) != 8 {
		return 0, fmt.Errorf("%s: %d bytes, want 8", path, len(b))
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}

// okSeries turns the progress lines of the request phase into answered requests per second,
// plotted against seconds since the kill, and finds the recovery: the end of the last interval
// after the kill that answered under 90 % of the rate. Intervals are the load tool's, about one
// second each. (Failures show as a drop in answers; timeouts are only counted Timeout later, so
// they are not used to place the recovery.)
func okSeries(series []progress, tKill time.Time, rate float64) ([]Point, time.Duration) {
	var pts []Point
	var recovery time.Duration
	var prev *progress
	for i := range series {
		cur := &series[i]
		if cur.Phase != "run" {
			prev = nil
			continue
		}
		if prev != nil {
			dt := cur.At.Sub(prev.At).Seconds()
			if dt > 0 {
				okps := float64(cur.OK-prev.OK) / dt
				pts = append(pts, Point{X: round3(cur.At.Sub(tKill).Seconds()), Y: round3(okps)})
				if okps < 0.9*rate && cur.At.After(tKill) {
					recovery = cur.At.Sub(tKill)
				}
			}
		}
		prev = cur
	}
	return pts, recovery.Round(10 * time.Millisecond)
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
