package loadgen

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkIdentities(t, res)
	return res
}

// checkIdentities asserts the accounting identities documented on Result.
func checkIdentities(t *testing.T, r *Result) {
	t.Helper()
	if r.Scheduled != r.Sent+r.OneWaySent+r.Unsent {
		t.Errorf("scheduled %d != sent %d + one-way %d + unsent %d", r.Scheduled, r.Sent, r.OneWaySent, r.Unsent)
	}
	if got := r.OK + r.BodyMismatches + r.Exceptions + r.Errors + r.Timeouts + r.Lost + r.Abandoned; got != r.Sent {
		t.Errorf("sent %d != ok %d + body mismatches %d + exceptions %d + errors %d + timeouts %d + lost %d + abandoned %d",
			r.Sent, r.OK, r.BodyMismatches, r.Exceptions, r.Errors, r.Timeouts, r.Lost, r.Abandoned)
	}
	if r.ForeignBodies > r.BodyMismatches {
		t.Errorf("foreign bodies %d > body mismatches %d", r.ForeignBodies, r.BodyMismatches)
	}
	var byStatus uint64
	for _, n := range r.ErrorByStatus {
		byStatus += n
	}
	if byStatus != r.Errors {
		t.Errorf("errors %d != sum by status %d", r.Errors, byStatus)
	}
	if got := r.HeartbeatsAnswered + r.HeartbeatsTimedOut + r.HeartbeatsLost + r.HeartbeatsAbandoned; got != r.HeartbeatsSent {
		t.Errorf("heartbeats sent %d != answered+timed out+lost+abandoned %d", r.HeartbeatsSent, got)
	}
	if answered := r.OK + r.BodyMismatches + r.Exceptions + r.Errors; r.LatencyHist.Count() != answered {
		t.Errorf("latency samples %d != answered requests %d", r.LatencyHist.Count(), answered)
	}
}

func TestCountsHeartbeatsAndEvents(t *testing.T) {
	p := startResponder(t, func(p *responder) {
		p.events = true
		p.reply = func(n int64) (byte, []byte) {
			switch n % 10 {
			case 0:
				return 100, []byte{0x0b, 'e', 'x', 'h', 'a', 'u', 's', 't', 'e', 'd', '!', '!'}
			case 1:
				return statusOK, []byte{0x90, 'N'} // WITH_EXCEPTION (body shape irrelevant here)
			}
			return statusOK, okBody
		}
	})
	var snaps []Snapshot
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, Config{
		Target: p.addr(), Conns: 20, Rate: 1000, Duration: 1500 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond,
	}, func(s Snapshot) {
		mu.Lock()
		snaps = append(snaps, s)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	checkIdentities(t, res)
	if res.Scheduled != 1500 || res.Sent != 1500 || res.Unsent != 0 {
		t.Fatalf("scheduled %d sent %d unsent %d, want 1500/1500/0", res.Scheduled, res.Sent, res.Unsent)
	}
	if res.OK != 1200 || res.Exceptions != 150 || res.ErrorByStatus[100] != 150 || res.Timeouts != 0 {
		t.Fatalf("ok %d exceptions %d errors %v timeouts %d", res.OK, res.Exceptions, res.ErrorByStatus, res.Timeouts)
	}
	if uint64(p.requests.Load()) != res.Sent {
		t.Fatalf("responder saw %d requests, we sent %d", p.requests.Load(), res.Sent)
	}
	// 20 connections × ~15 beats at 100 ms over a 1.5 s run; every one answered.
	if res.HeartbeatsSent < 20*12 || res.HeartbeatsAnswered != res.HeartbeatsSent ||
		uint64(p.heartbeats.Load()) != res.HeartbeatsSent {
		t.Fatalf("heartbeats sent %d answered %d, responder saw %d", res.HeartbeatsSent, res.HeartbeatsAnswered, p.heartbeats.Load())
	}
	if res.HeartbeatRTT.Count != res.HeartbeatsAnswered || res.HeartbeatRTT.Max <= 0 {
		t.Fatalf("heartbeat RTT %+v", res.HeartbeatRTT)
	}
	// The server's heartbeat got the Java-exact reply; READONLY and WRITEABLE were counted.
	if res.ServerHeartbeats != 20 || p.hbRepliesOK.Load() != 20 || p.hbRepliesBad.Load() != 0 {
		t.Fatalf("server heartbeats %d, replies ok %d bad %d", res.ServerHeartbeats, p.hbRepliesOK.Load(), p.hbRepliesBad.Load())
	}
	if res.EventsReadonly != 20 || res.EventsWriteable != 20 || res.EventsOther != 0 {
		t.Fatalf("events R %d W %d other %d", res.EventsReadonly, res.EventsWriteable, res.EventsOther)
	}
	if res.ConnsOpened != 20 || res.ConnsOpenAtEnd != 20 || res.ConnectTime.Count != 20 || res.FirstReply.Count != 20 {
		t.Fatalf("opened %d open at end %d connect samples %d first replies %d",
			res.ConnsOpened, res.ConnsOpenAtEnd, res.ConnectTime.Count, res.FirstReply.Count)
	}
	if res.Latency.P50 <= 0 || res.Latency.P50 > time.Second || res.Latency.Max < res.Latency.P50 {
		t.Fatalf("latency %v on a loopback responder", res.Latency)
	}
	if res.CPU.User+res.CPU.Sys <= 0 || res.CPU.PerRequest <= 0 || res.CPU.RunFrames < res.Sent {
		t.Fatalf("cpu %+v", res.CPU)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(snaps) == 0 {
		t.Fatal("no progress snapshot")
	}
	last := snaps[len(snaps)-1]
	if last.ConnsOpen != 20 || last.Sent == 0 || last.HeartbeatsOK == 0 || last.Readonly != 20 {
		t.Fatalf("last snapshot %+v", last)
	}
}

func TestTimeoutsWhenRepliesWithheld(t *testing.T) {
	p := startResponder(t, func(p *responder) { p.withhold = true })
	res := run(t, Config{
		Target: p.addr(), Conns: 5, Rate: 200, Duration: 500 * time.Millisecond,
		Timeout: 200 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
	})
	if res.Sent != 100 || res.Timeouts != 100 || res.OK != 0 || res.Latency.Count != 0 {
		t.Fatalf("sent %d timeouts %d ok %d latency samples %d", res.Sent, res.Timeouts, res.OK, res.Latency.Count)
	}
	if res.HeartbeatsAnswered == 0 || res.HeartbeatsTimedOut != 0 {
		t.Fatalf("heartbeats answered %d timed out %d: a provider that withholds replies still beats",
			res.HeartbeatsAnswered, res.HeartbeatsTimedOut)
	}
}

func TestResetsCounted(t *testing.T) {
	p := startResponder(t, func(p *responder) { p.rstOnFirst = true })
	res := run(t, Config{Target: p.addr(), Conns: 10, Rate: 200, Duration: 500 * time.Millisecond})
	if res.Resets != 10 || res.ClosedByPeer != 0 || res.OtherConnErrors != 0 {
		t.Fatalf("resets %d closed %d other %d, want 10/0/0", res.Resets, res.ClosedByPeer, res.OtherConnErrors)
	}
	if res.Lost < 10 || res.OK != 0 || res.Unsent == 0 || res.ConnsOpenAtEnd != 0 {
		t.Fatalf("lost %d ok %d unsent %d open %d: every connection's first request is lost, later ones unsent",
			res.Lost, res.OK, res.Unsent, res.ConnsOpenAtEnd)
	}

	// With Reconnect, consumers come back (and get reset again).
	res = run(t, Config{Target: p.addr(), Conns: 2, Rate: 100, Duration: 500 * time.Millisecond,
		Reconnect: 20 * time.Millisecond})
	if res.Reconnects == 0 || res.Resets < 3 || res.ConnsOpened != 2+res.Reconnects || res.ConnectFailures.Total() != 0 {
		t.Fatalf("reconnects %d resets %d opened %d", res.Reconnects, res.Resets, res.ConnsOpened)
	}
}

// A provider stall of 200 ms must show in the tail for every request scheduled during it: at 1,000/s,
// ~200 requests wait between 0 and 200 ms, so p90 is near 100 ms and p99 near 190 ms.
func TestLatencyFromScheduleServerStall(t *testing.T) {
	p := startResponder(t, func(p *responder) { p.stallAt, p.stall = 300, 200*time.Millisecond })
	res := run(t, Config{Target: p.addr(), Conns: 4, Rate: 1000, Duration: time.Second})
	checkStall(t, res)
	// No answer arrived while the provider stalled: the longest gap is the stall.
	if res.MaxAnswerGap < 150*time.Millisecond || res.MaxAnswerGap > 600*time.Millisecond {
		t.Errorf("longest gap without an answer %v; want about the 200 ms stall", res.MaxAnswerGap)
	}
}

// The same when this process falls behind (the scheduler itself is blocked for 200 ms): requests are
// sent late but measured from when they were due.
func TestLatencyFromScheduleSenderStall(t *testing.T) {
	p := startResponder(t, nil)
	cfg := Config{Target: p.addr(), Conns: 4, Rate: 1000, Duration: time.Second}
	cfg.hooks.beforeRequest = func(k uint64) {
		if k == 300 {
			time.Sleep(200 * time.Millisecond) // simulates this process stalling
		}
	}
	res := run(t, cfg)
	checkStall(t, res)
}

func checkStall(t *testing.T, res *Result) {
	t.Helper()
	if res.OK != 1000 {
		t.Fatalf("ok %d, want 1000", res.OK)
	}
	l := res.Latency
	if l.Max < 190*time.Millisecond || l.P99 < 150*time.Millisecond || l.P90 < 60*time.Millisecond || l.P50 > 100*time.Millisecond {
		t.Fatalf("latency %v: the 200 ms stall must show in p90/p99/max and not in p50", l)
	}
}

func TestConnectFailuresAndRate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	res := run(t, Config{Target: closed, Conns: 7, Rate: 100, Duration: 200 * time.Millisecond})
	if res.ConnectFailures.Refused != 7 || res.ConnsOpened != 0 || res.Unsent != res.Scheduled || res.Scheduled != 20 {
		t.Fatalf("refused %d opened %d unsent %d scheduled %d", res.ConnectFailures.Refused, res.ConnsOpened, res.Unsent, res.Scheduled)
	}

	p := startResponder(t, nil)
	res = run(t, Config{Target: p.addr(), Conns: 20, ConnectRate: 100, Duration: 100 * time.Millisecond,
		SourceAddrs: mustAddrs(t, "127.0.0.2", "127.0.0.3")})
	if res.ConnectPhase < 180*time.Millisecond || res.ConnsOpened != 20 {
		t.Fatalf("20 conns at 100/s: connect phase %v, opened %d", res.ConnectPhase, res.ConnsOpened)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	srcs := map[string]int{}
	for _, c := range p.conns {
		h, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		srcs[h]++
	}
	if srcs["127.0.0.2"] != 10 || srcs["127.0.0.3"] != 10 {
		t.Fatalf("source addresses %v, want 10 each from 127.0.0.2 and .3", srcs)
	}
}

func TestProbeOnConnectAndHonorReadonly(t *testing.T) {
	p := startResponder(t, func(p *responder) { p.events = true })
	// Every connection gets READONLY then WRITEABLE at once, so honoring READONLY loses nothing here.
	res := run(t, Config{Target: p.addr(), Conns: 3, ProbeOnConnect: true, HonorReadonly: true,
		Rate: 100, Duration: 300 * time.Millisecond})
	if res.HeartbeatsSent != 3 || res.HeartbeatsAnswered != 3 || res.FirstReply.Count != 3 || res.OK != 30 {
		t.Fatalf("probes %d answered %d first replies %d ok %d", res.HeartbeatsSent, res.HeartbeatsAnswered, res.FirstReply.Count, res.OK)
	}
}

// With LeaveOnReadonly a connection sends nothing after READONLY (WRITEABLE does not bring it
// back) and closes itself once nothing is outstanding: no request lost, no reset, no heartbeat
// left unanswered, every connection counted as left.
func TestLeaveOnReadonly(t *testing.T) {
	p := startResponder(t, func(p *responder) { p.events = true })
	res := run(t, Config{Target: p.addr(), Conns: 3, ProbeOnConnect: true, LeaveOnReadonly: true,
		HeartbeatInterval: 20 * time.Millisecond, Rate: 100, Duration: 300 * time.Millisecond})
	if res.LeftOnReadonly != 3 || res.ClosedByPeer != 0 || res.Resets != 0 || res.OtherConnErrors != 0 {
		t.Fatalf("left %d closed by peer %d resets %d other %d; want 3 left", res.LeftOnReadonly, res.ClosedByPeer, res.Resets, res.OtherConnErrors)
	}
	if res.Lost != 0 || res.HeartbeatsLost != 0 || res.HeartbeatsAnswered != res.HeartbeatsSent || res.OK != res.Sent {
		t.Fatalf("lost %d, heartbeats lost %d, heartbeats %d/%d answered, ok %d of %d sent", res.Lost, res.HeartbeatsLost,
			res.HeartbeatsAnswered, res.HeartbeatsSent, res.OK, res.Sent)
	}
	if res.Unsent < 25 {
		t.Fatalf("unsent %d: requests went to connections that had left", res.Unsent)
	}
	if !res.HonorReadonly {
		t.Fatal("LeaveOnReadonly does not imply HonorReadonly")
	}
}

func TestCancelledRun(t *testing.T) {
	p := startResponder(t, func(p *responder) { p.withhold = true })
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	var calls atomic.Int32
	res, err := Run(ctx, Config{Target: p.addr(), Conns: 2, Rate: 100, Duration: time.Minute}, func(Snapshot) {
		calls.Add(1)
		once.Do(cancel)
	})
	if err == nil || res == nil || !res.Interrupted || res.Abandoned+res.Timeouts != res.Sent {
		t.Fatalf("err %v res %+v", err, res)
	}
	checkIdentities(t, res)
}

func TestValidate(t *testing.T) {
	ok := Config{Target: "127.0.0.1:1", Conns: 1, Duration: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*Config){
		"target":    func(c *Config) { c.Target = "nohost" },
		"conns":     func(c *Config) { c.Conns = MaxConnsPerProcess + 1 },
		"no conns":  func(c *Config) { c.Conns = 0 },
		"duration":  func(c *Config) { c.Duration = MaxDuration + 1 },
		"unbounded": func(c *Config) { c.Duration = 0 },
		"rate":      func(c *Config) { c.Rate = -1 },
		"heartbeat": func(c *Config) { c.HeartbeatInterval = time.Millisecond },
		"timeout":   func(c *Config) { c.Timeout = time.Hour },
	}
	for name, f := range bad {
		c := ok
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.HasPrefix(err.Error(), "loadgen: ") {
			t.Errorf("%s: error %q", name, err)
		}
	}
}

// Config.Pause holds the request phase: requests due meanwhile are never sent and count as paused
// (sent + paused is exactly the run's Rate×Duration), and the pause is not an answer gap.
func TestPause(t *testing.T) {
	p := startResponder(t, nil)
	pause := new(atomic.Bool)
	cfg := Config{Target: p.addr(), Conns: 4, Rate: 1000, Duration: 1500 * time.Millisecond, Pause: pause}
	var once sync.Once
	cfg.hooks.beforeRequest = func(k uint64) {
		if k == 300 {
			once.Do(func() {
				pause.Store(true)
				time.AfterFunc(600*time.Millisecond, func() { pause.Store(false) })
			})
		}
	}
	res := run(t, cfg)
	if res.Sent+res.Paused != 1500 || res.Paused < 300 || res.OK != res.Sent {
		t.Fatalf("sent %d paused %d ok %d: want sent+paused = 1500, at least 300 paused, every sent one answered",
			res.Sent, res.Paused, res.OK)
	}
	if uint64(p.requests.Load()) != res.Sent {
		t.Fatalf("responder saw %d requests, we sent %d", p.requests.Load(), res.Sent)
	}
	// No heartbeats: nothing was answered during the 600 ms pause, which must not count as a gap.
	if res.MaxAnswerGap >= 450*time.Millisecond {
		t.Fatalf("longest gap without an answer %v: the pause counted", res.MaxAnswerGap)
	}
}
