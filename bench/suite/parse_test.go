package main

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and parentheses must not shift the fields.
	stat := "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 8 0 12345 1000000 500 18446744073709551615"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 325 * clockTick; got != want {
		t.Fatalf("cpu = %v, want %v", got, want)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Fatal("no error for garbage")
	}
	if _, err := parseStatCPU("1 (x) S 1 2"); err == nil {
		t.Fatal("no error for a short stat")
	}
}

func TestSampleUsageSelf(t *testing.T) {
	u, err := sampleUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSSKiB <= 0 {
		t.Fatalf("RSS of this test process = %d KiB", u.RSSKiB)
	}
	// Burn CPU until /proc says 100 ms more were used; it must get there, and never say more than
	// the wall time allows (one spinning goroutine plus the runtime's threads on NumCPU cores).
	start := time.Now()
	x := 0
	for {
		for range 1_000_000 {
			x++
		}
		u2, err := sampleUsage(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		cpu, wall := u2.Sub(u)
		if cpu >= 100*time.Millisecond {
			if limit := wall*time.Duration(runtime.NumCPU()) + clockTick; cpu > limit {
				t.Fatalf("%v CPU in %v wall", cpu, wall)
			}
			return
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("20 s of spinning measured as %v CPU (x=%d)", cpu, x)
		}
	}
}

func TestParseStatusRSS(t *testing.T) {
	s := "Name:\tx\nVmPeak:\t  9999 kB\nVmRSS:\t    1234 kB\nThreads:\t1\n"
	if got := parseStatusRSS(s); got != 1234 {
		t.Fatalf("rss = %d", got)
	}
	if got := parseStatusRSS("Name:\tkthread\n"); got != 0 {
		t.Fatalf("rss without VmRSS = %d", got)
	}
}

func TestParseNetstat(t *testing.T) {
	text := "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPSynRetrans\n" +
		"TcpExt: 3 17 19 40\n" +
		"IpExt: InNoRoutes\nIpExt: 0\n"
	m, err := parseNetstat(text, "TcpExt")
	if err != nil {
		t.Fatal(err)
	}
	if m["ListenOverflows"] != 17 || m["ListenDrops"] != 19 || m["TCPSynRetrans"] != 40 {
		t.Fatalf("parsed %v", m)
	}
	after := map[string]uint64{"ListenOverflows": 20, "ListenDrops": 19, "TCPSynRetrans": 41}
	d := counterDelta(m, after, "ListenOverflows", "ListenDrops", "TCPSynRetrans")
	if d["ListenOverflows"] != 3 || d["ListenDrops"] != 0 || d["TCPSynRetrans"] != 1 {
		t.Fatalf("delta %v", d)
	}
	if _, err := parseNetstat("TcpExt: A B\nTcpExt: 1\n", "TcpExt"); err == nil {
		t.Fatal("no error for mismatched lines")
	}
	// The real file of this machine parses.
	if b, err := os.ReadFile("/proc/net/netstat"); err == nil {
		if m, err := parseNetstat(string(b), "TcpExt"); err != nil {
			t.Fatal(err)
		} else if _, ok := m["ListenOverflows"]; !ok {
			t.Fatal("no ListenOverflows in /proc/net/netstat")
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP stormgate_heartbeats_answered_total x
# TYPE stormgate_heartbeats_answered_total counter
stormgate_heartbeats_answered_total{side="downstream"} 1500
stormgate_heartbeats_answered_total{side="upstream"} 2
stormgate_upstream_heartbeats_sent_total 7
stormgate_local_replies_total{reason="upstream lost, retry"} 3
stormgate_local_replies_total{reason="hold_expired"} 4
go_gc_duration_seconds{quantile="0.5"} 1.5e-05
bad line
`
	m := parseMetrics(text)
	if got := m.sum("stormgate_heartbeats_answered_total", `side="downstream"`); got != 1500 {
		t.Fatalf("downstream = %v", got)
	}
	if got := m.sum("stormgate_heartbeats_answered_total"); got != 1502 {
		t.Fatalf("all sides = %v", got)
	}
	if got := m.sum("stormgate_upstream_heartbeats_sent_total"); got != 7 {
		t.Fatalf("sent = %v", got)
	}
	if got := m.sum("stormgate_local_replies_total"); got != 7 {
		t.Fatalf("label value with spaces and commas: sum = %v", got)
	}
	if got := m.sum("go_gc_duration_seconds"); got != 1.5e-05 {
		t.Fatalf("exponent: %v", got)
	}
	before := parseMetrics("stormgate_upstream_heartbeats_sent_total 2\n")
	if d := delta(before, m, "stormgate_upstream_heartbeats_sent_total"); d != 5 {
		t.Fatalf("delta = %v", d)
	}
	if d := delta(nil, m, "stormgate_upstream_heartbeats_sent_total"); d != 0 {
		t.Fatalf("delta without a before scrape = %v", d)
	}
}

func TestParseProgress(t *testing.T) {
	// The exact form cmd/stormbench prints once a second.
	line := "[  12s] run     conns 10000 fail 2 | req 60000 ok 59990 err 1 tmo 3 lost 4 unsent 5 | hb 120000/120010 | reset 6 eof 7 | p50 0.41ms p99 12.50ms | cpu 43%"
	now := time.Now()
	p, ok := parseProgress(line, now)
	if !ok {
		t.Fatal("line not recognized")
	}
	want := progress{At: now, Phase: "run", Conns: 10000, ConnFail: 2, Sent: 60000, OK: 59990, Err: 1, Tmo: 3, Lost: 4, Unsent: 5,
		HBOK: 120000, HBSent: 120010, Resets: 6, EOF: 7, P50ms: 0.41, P99ms: 12.5}
	if p != want {
		t.Fatalf("got %+v\nwant %+v", p, want)
	}
	if _, ok := parseProgress("stormbench: 100 connections to x", now); ok {
		t.Fatal("summary line taken for progress")
	}
}

func TestParseBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/stormgate/stormgate/proxy
cpu: AMD EPYC
BenchmarkHeartbeatReply-2    	 1000000	      1052 ns/op	       0 B/op	       0 allocs/op
BenchmarkForward/batch-2     	  500000	      2100.5 ns/op	      16 B/op	       1 allocs/op
PASS
ok  	github.com/stormgate/stormgate/proxy	3.1s
pkg: github.com/stormgate/stormgate/keepalive
BenchmarkWheel-2   	 2000000	       55.3 ns/op	   12.5 MB/s	       0 B/op	       0 allocs/op
`
	rows := parseBench(out)
	if len(rows) != 3 {
		t.Fatalf("rows %+v", rows)
	}
	if r := rows[1]; r.Package != "proxy" || r.Name != "Forward/batch" || r.NsOp != 2100.5 || r.BytesOp != 16 || r.AllocsOp != 1 {
		t.Fatalf("row %+v", r)
	}
	if r := rows[2]; r.Package != "keepalive" || r.NsOp != 55.3 || r.AllocsOp != 0 {
		t.Fatalf("row with an extra metric %+v", r)
	}
}

func TestOKSeries(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// 1,000 req/s; provider killed at 3.5 s; nothing answered in [4,5], a burst in [5,6], full after.
	var series []progress
	oks := []uint64{0, 1000, 2000, 3000, 3500, 3500, 5500, 6500, 7500}
	series = append(series, progress{At: at(-0.5), Phase: "connect"})
	for i, ok := range oks {
		series = append(series, progress{At: at(float64(i)), Phase: "run", OK: ok})
	}
	series = append(series, progress{At: at(9), Phase: "drain", OK: 7500})
	kill := at(3.5)
	pts, rec := okSeries(series, kill, 1000)
	if len(pts) != len(oks)-1 {
		t.Fatalf("points %v", pts)
	}
	if pts[0].X != -2.5 || pts[0].Y != 1000 {
		t.Fatalf("first point %v", pts[0])
	}
	// Bad intervals after the kill end at 4 s (500/s) and 5 s (0/s): recovered 1.5 s after the kill.
	if rec != 1500*time.Millisecond {
		t.Fatalf("recovery %v", rec)
	}
	if _, rec := okSeries(series[:4], kill, 1000); rec != 0 {
		t.Fatalf("recovery before any kill effect: %v", rec)
	}
}
