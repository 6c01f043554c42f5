package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/loadgen/hist"
)

// printer writes one progress line per snapshot.
type printer struct {
	w     io.Writer
	quiet bool
	mu    sync.Mutex
	prev  loadgen.Snapshot
}

func newPrinter(w io.Writer, quiet bool) *printer { return &printer{w: w, quiet: quiet} }

func (p *printer) progress(s loadgen.Snapshot) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cpu := 0.0
	if dt := s.Elapsed - p.prev.Elapsed; dt > 0 {
		cpu = 100 * float64(s.CPU-p.prev.CPU) / float64(dt)
	}
	fmt.Fprintf(p.w, "[%4.0fs] %-7s conns %d fail %d | req %d ok %d err %d tmo %d lost %d unsent %d | hb %d/%d | reset %d eof %d | p50 %s p99 %s | cpu %.0f%%\n",
		s.Elapsed.Seconds(), s.Phase, s.ConnsOpen, s.ConnectFailures, s.Sent, s.OK, s.Errors, s.Timeouts,
		s.Lost, s.Unsent, s.HeartbeatsOK, s.HeartbeatsSent, s.Resets, s.ClosedByPeer, ms(s.P50), ms(s.P99), cpu)
	p.prev = s
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/1e6) }

func printSummary(w io.Writer, r *loadgen.Result) {
	var b strings.Builder
	fmt.Fprintf(&b, "stormbench: %d connections to %s (%d process(es)), request phase %v at %g/s, %s\n",
		r.Conns, r.Target, r.Workers, r.RunPhase.Round(time.Millisecond), r.Rate, map[bool]string{true: "INTERRUPTED", false: "complete"}[r.Interrupted])
	cf := r.ConnectFailures
	fmt.Fprintf(&b, "  connections  opened %d (connect phase %v)  open at end %d  failed %d (refused %d, timeout %d, reset %d, other %d)  reconnects %d\n",
		r.ConnsOpened, r.ConnectPhase.Round(time.Millisecond), r.ConnsOpenAtEnd, cf.Total(), cf.Refused, cf.Timeout, cf.Reset, cf.Other, r.Reconnects)
	fmt.Fprintf(&b, "               resets %d  closed by peer %d  protocol errors %d  other errors %d",
		r.Resets, r.ClosedByPeer, r.ProtocolErrors, r.OtherConnErrors)
	if r.LeaveOnReadonly {
		fmt.Fprintf(&b, "  left after READONLY %d", r.LeftOnReadonly)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  requests     scheduled %d  sent %d  ok %d  exceptions %d  errors %d%s  timeouts %d  lost %d  unsent %d  abandoned %d  paused %d\n",
		r.Scheduled, r.Sent, r.OK, r.Exceptions, r.Errors, byStatus(r.ErrorByStatus), r.Timeouts, r.Lost, r.Unsent, r.Abandoned, r.Paused)
	fmt.Fprintf(&b, "               longest time without any answer %s\n", ms(r.MaxAnswerGap))
	if r.BodyMax > 0 {
		verdict := "every answer carried exactly its request's body"
		if r.BodyMismatches > 0 {
			verdict = fmt.Sprintf("INTEGRITY FAILURE: %d answers were not their request's body (%d of them another request's)",
				r.BodyMismatches, r.ForeignBodies)
		}
		fmt.Fprintf(&b, "  bodies       checked %d..%d bytes, one-way sent %d: %s\n", r.BodyMin, r.BodyMax, r.OneWaySent, verdict)
	}
	if r.LateReplies+r.UnknownIDs+r.Duplicates+r.UnexpectedRequests > 0 {
		fmt.Fprintf(&b, "               late replies %d  unknown ids %d  duplicates %d  unexpected requests %d\n",
			r.LateReplies, r.UnknownIDs, r.Duplicates, r.UnexpectedRequests)
	}
	if r.Protocol == loadgen.ProtocolTriple {
		fmt.Fprintf(&b, "  triple       grpc-status%s  streams waited %d  most open on a connection %d  reset by server %d  GOAWAYs %d\n",
			byStatus(r.GRPCStatus), r.StreamsWaited, r.MaxOpenStreams, r.StreamResets, r.GoAways)
		fmt.Fprintf(&b, "  pings        sent %d  answered %d  timed out %d  lost %d | from server: pings %d\n",
			r.HeartbeatsSent, r.HeartbeatsAnswered, r.HeartbeatsTimedOut, r.HeartbeatsLost, r.ServerHeartbeats)
	} else {
		fmt.Fprintf(&b, "  heartbeats   sent %d  answered %d  timed out %d  lost %d | from server: heartbeats %d  READONLY %d  WRITEABLE %d  other %d\n",
			r.HeartbeatsSent, r.HeartbeatsAnswered, r.HeartbeatsTimedOut, r.HeartbeatsLost, r.ServerHeartbeats, r.EventsReadonly, r.EventsWriteable, r.EventsOther)
	}
	line := func(name string, s hist.Summary) {
		if s.Count > 0 {
			fmt.Fprintf(&b, "  %-12s %s\n", name, s)
		}
	}
	line("latency", r.Latency)
	line("heartbeat", r.HeartbeatRTT)
	line("connect", r.ConnectTime)
	line("first reply", r.FirstReply)
	c := r.CPU
	run := c.RunUser + c.RunSys
	pct := 0.0
	if r.RunPhase > 0 {
		pct = 100 * float64(run) / float64(r.RunPhase)
	}
	fmt.Fprintf(&b, "  tool cpu     total user %v sys %v | request phase %v (%.1f%% of one core): %.2fµs/request, %.2fµs/frame | max RSS %d MiB\n",
		c.User.Round(time.Millisecond), c.Sys.Round(time.Millisecond), run.Round(time.Millisecond), pct,
		float64(c.PerRequest)/1e3, float64(c.PerFrame)/1e3, c.MaxRSSKiB/1024)
	_, _ = io.WriteString(w, b.String())
}

func byStatus(m map[int]uint64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d:%d", k, m[k])
	}
	return " {" + strings.Join(parts, " ") + "}"
}
