package main

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// addFloorFixture adds the floor scenarios and profiles to a fixture, figures scaled by k (the
// verdicts do not change with k: every one is a ratio, or far from its bound).
func addFloorFixture(r *Results, k float64) {
	o := &r.Options
	o.QuietWindow, o.QuietSettle = 30*time.Second, 5*time.Second
	o.HBConns, o.HBWindow, o.HBSettle, o.HBPairs = 10000, 6*time.Second, 2*time.Second, 3
	o.FwdLoads = []FwdLoad{{2000, 4000}, {10000, 5000}}
	o.FwdLead, o.FwdWindow, o.FwdWindows, o.FwdProfWindow = 2*time.Second, 4*time.Second, 3, 4*time.Second
	r.Machine.Perf = true
	for i := range r.Latency.Rows {
		x := &r.Latency.Rows[i]
		x.MedianP99ms, x.P99Seconds = x.P99ms*0.8, 7
	}
	win := 30 * time.Second
	r.Quiet = &QuietResult{Window: win, Settle: 5 * time.Second}
	for i, tg := range []string{direct, haproxy, stormgate, hbFloor} {
		r.Quiet.Rows = append(r.Quiet.Rows, QuietRow{Target: tg, Elapsed: win,
			CPUTime: time.Duration(k * float64([]time.Duration{300, 0, 450, 0}[i]*time.Millisecond)), RSSMiB: 20 * k})
	}
	r.Heartbeat = &HeartbeatResult{Conns: 10000, Period: time.Second, Window: 6 * time.Second, Settle: 2 * time.Second, Pairs: 3,
		Probe: "da bb e2 00", Answers: map[string]string{hbFloor: "da bb 22 14", npFloor: "da bb 22 14", stormgate: "da bb 22 14"}, Same: true,
		Commands: map[string]string{hbFloor: "stormbench load f", npFloor: "stormbench load n", stormgate: "stormbench load s"},
		HBFailed: map[string]uint64{hbFloor: 3, npFloor: 4, stormgate: 5}, HBLate: map[string]uint64{hbFloor: 3, npFloor: 4, stormgate: 5}}
	for pair := -1; pair < 3; pair++ {
		for i, tg := range hbTargets {
			us := []float64{17.8, 21.3, 24.7}[i] * (1 + 0.01*float64(pair))
			r.Heartbeat.Windows = append(r.Heartbeat.Windows, HBWindow{Pair: pair, Target: tg, Elapsed: 6 * time.Second,
				CPU: time.Duration(us * 60000 * k * float64(time.Microsecond)), Sys: time.Duration(us * 40000 * k * float64(time.Microsecond)),
				HB: 60000 * k, Profiled: pair < 0})
		}
	}
	r.Forward = &ForwardResult{Provider: dubboGoProvider, Method: fwdMethod, Arg: fwdArg, Loads: o.FwdLoads, Lead: o.FwdLead,
		Window: o.FwdWindow, Windows: o.FwdWindows, ProfWindow: o.FwdProfWindow}
	for _, l := range o.FwdLoads {
		for i, tg := range fwdTargets {
			base := []float64{60, 30, 80, 100, 98}[i] * k
			r.Forward.Rows = append(r.Forward.Rows, FwdRow{Target: tg, Conns: l.Conns, Rate: l.Rate, Command: "stormbench load w",
				UsPerReq: []float64{base, base * 1.05, base * 0.97}, SysUsPerReq: []float64{base / 2, base / 2, base / 2},
				ProviderUsPerReq: []float64{40 * k, 40 * k, 40 * k}, ProxyCores: []float64{0.3 * k, 0.3 * k, 0.3 * k},
				Sent: 60000, OK: 60000, P50ms: 0.5 * k, P99ms: 2 * k})
		}
	}
	split := func(kern float64) []Share {
		return []Share{{catKernel, kern, "readv"}, {catRuntime, 0.2, "runtime.findRunnable"}, {catNetpoll, 0.1, "github.com/cloudwego/netpoll.(*defaultPoll).Wait"},
			{catSG, 1 - kern - 0.35, "github.com/stormgate/stormgate/proxy.(*session).onRequest"}, {catOther, 0.05, "time.Now"}}
	}
	prof := func(key, tg string, ops float64, op string, cpu time.Duration) Profile {
		return Profile{Scenario: key, Target: tg, Window: 5 * time.Second, ProfWin: 5 * time.Second, Ops: ops, OpName: op,
			CPU: cpu, SysCPU: cpu / 2, Syscalls: 3 * math.Max(ops, 100), CtxSwitches: math.Max(ops, 100), PerfSamples: int(1000 * k),
			Split: split(0.55), Kernel: []Share{{"readv", 0.3, "github.com/cloudwego/netpoll.readv"}, {"write", 0.25, "golang.org/x/sys/unix.write"}},
			PprofSamples: time.Second, PprofTop: []TopRow{{Flat: 500 * time.Millisecond, FlatPct: 50, Cum: 500 * time.Millisecond, CumPct: 50,
				Func: "internal/runtime/syscall/linux.Syscall6"}}}
	}
	ck := func(d time.Duration) time.Duration { return time.Duration(k * float64(d)) }
	r.Profiles = append(r.Profiles,
		prof(profileQuiet, stormgate, 0, "", ck(60*time.Millisecond)), prof(profileQuiet, haproxy, 0, "", 0),
		prof(profileHeartbeat, hbFloor, 50000, "heartbeat", ck(890*time.Millisecond)), prof(profileHeartbeat, stormgate, 50000, "heartbeat", ck(1235*time.Millisecond)),
		prof(profileIdle30, stormgate, 1600, "heartbeat", ck(400*time.Millisecond)),
		prof(profileThroughput, stormgate, 100000, "request", ck(4*time.Second)))
	for _, l := range o.FwdLoads {
		for i, tg := range fwdProfiled {
			r.Profiles = append(r.Profiles, prof(profileForward(l), tg, 20000, "request", ck([]time.Duration{1200, 600, 1600, 2000}[i]*time.Millisecond)))
		}
	}
}

func TestFloorReport(t *testing.T) {
	r := fixture(1)
	p := &reporter{r: r, img: "img"}
	doc := p.markdown()
	for _, want := range []string{
		"| CPU per answered heartbeat, 10,000 consumers beating every second: Stormgate ÷ the bare epoll responder (same run, alternating windows, median of 3) | – | – | 24.95 µs (responder 17.98 µs) | ≤ 1.15× | 1.39×: **missed** | 21 % above the target",
		"| CPU with no consumer connected, over 30.00 s (Direct: the dubbo-go provider alone) | 1.000 % | 0.000 % | 1.500 % | Stormgate ≤ 0.20 % | **missed** | 1.300 % of a core over the target",
		"Proxy CPU per forwarded request, SayHello on the dubbo-go provider, 2,000 conns, 4,000 req/s: Stormgate ÷ HAProxy (median of 3 alternating rounds) | – | 60.00 µs | 100.00 µs (1.67×) | ≤ 0.8× | **missed** | 108 % above the target",
		"Max throughput, small requests, 10,000 conns: Stormgate ÷ HAProxy | 40,000 req/s | 30,000 req/s | 20,000 req/s | ≥ 1.2× | 0.67×: **missed** | 44 % below the target: the target needs 36,000 req/s.",
		"| Memory per idle consumer connection (the provider's when direct; the proxy's otherwise) | 20.0 KiB | 3.0 KiB | 6.0 KiB | Stormgate ≤ 4 KiB | **missed** | 2.0 KiB over the target.",
		"**Stormgate ÷ responder: 1.39×** (median of the rounds 1.39×, 1.39×, 1.39×",
		"**netpoll responder ÷ responder: 1.20×** (median of the rounds 1.20×, 1.20×, 1.20×; median 21.51 µs per heartbeat)",
		"A responder on netpoll's connections with no other code (section 7) spent 21.51 µs per heartbeat, 1.20× the bare responder",
		"| 10,000 conns, 5,000 req/s | bare epoll forwarder | 30.00 µs | 29.1–31.5 µs | 15.00 µs | 0.50× |",
		"| 10,000 conns, 5,000 req/s | netpoll forwarder | 80.00 µs | 77.6–84.0 µs | 40.00 µs | 1.33× |",
		"A forwarder on netpoll's connections with no other code (section 9) spent 80.00 µs per request, 1.33× HAProxy and 2.67× the bare epoll forwarder; Stormgate spent 1.25× that",
		"Per request Stormgate made 3.00 system calls and 1.00 context switches against HAProxy's 3.00 and 1.00.",
		"| readv | 30.0 % | `netpoll.readv` |",
		"| The same, p99 as the median of the one-second p99s after the first 2 s (7 seconds) | 0.64 ms | 0.80 ms (+0.16 ms) | 0.88 ms (+0.24 ms) | added ≤ 0.50 ms | **met** | – |",
		"| 500ms | 50.0 % | 500ms | 50.0 % | `internal/runtime/syscall/linux.Syscall6` |",
		"| Stormgate CPU per forwarded request with per-method metrics ÷ without (metrics.max_methods 0), 2,000 conns, 4,000 req/s (median of 3 alternating rounds) | – | – | 100.00 µs ÷ 98.00 µs (1.02×) | ≤ 1.05× | **met** |",
		"| 10,000 conns, 5,000 req/s | Stormgate without per-method metrics | 98.00 µs |",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
	// A met target prints no reason; a missing scenario says "not measured".
	r.Heartbeat.Windows = r.Heartbeat.Windows[:0]
	r.Forward = nil
	doc = (&reporter{r: r, img: "img"}).markdown()
	for _, want := range []string{"| ≤ 1.15× | not measured | – |", "SayHello on the dubbo-go provider, 2,000 conns, 4,000 req/s: Stormgate ÷ HAProxy (median of 3 alternating rounds) | – | n/a | n/a | ≤ 0.8× | not measured | – |"} {
		if !strings.Contains(doc, want) {
			t.Errorf("doc lacks %q", want)
		}
	}
}

func TestHeartbeatRatioIsMedianOfPairs(t *testing.T) {
	w := func(pair int, tg string, us float64, profiled bool) HBWindow {
		return HBWindow{Pair: pair, Target: tg, CPU: time.Duration(us * 1000 * float64(time.Microsecond)), HB: 1000, Profiled: profiled}
	}
	r := &HeartbeatResult{Pairs: 3, Windows: []HBWindow{
		w(0, hbFloor, 10, false), w(0, stormgate, 12, false),
		w(1, stormgate, 30, false), w(1, hbFloor, 10, false), // an outlier pair
		w(2, hbFloor, 20, false), w(2, stormgate, 22, false),
		w(-1, hbFloor, 1, true), w(-1, stormgate, 100, true), // profiled: not counted
	}}
	ratio, fl, sg, pairs := r.ratio()
	if len(pairs) != 3 || math.Abs(ratio-1.2) > 1e-9 || fl != 10 || sg != 22 {
		t.Fatalf("ratio %v floor %v stormgate %v pairs %v; want 1.2, 10, 22 over 3 pairs", ratio, fl, sg, pairs)
	}
	// The netpoll responder's ratio comes from the same rounds; a round it is missing from is skipped.
	r.Windows = append(r.Windows, w(0, npFloor, 11, false), w(2, npFloor, 30, false), w(-1, npFloor, 50, true))
	if nr, _, nu, nps := r.ratioOf(npFloor); len(nps) != 2 || math.Abs(nr-1.3) > 1e-9 || nu != 20.5 {
		t.Fatalf("netpoll responder: ratio %v median %v pairs %v; want 1.3 and 20.5 over 2 rounds", nr, nu, nps)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median of an even count = %v", m)
	}
}

const perfScriptSample = `sidecar 101 
	ffffffff81e99d8a __skb_datagram_iter ([kernel.kallsyms])
	ffffffff816d6bf5 do_readv ([kernel.kallsyms])
	ffffffff8225a101 do_syscall_64 ([kernel.kallsyms])
	ffffffff81000130 entry_SYSCALL_64_after_hwframe ([kernel.kallsyms])
	            e22e internal/runtime/syscall/linux.Syscall6 (/bin/sidecar)
	           e7d55 syscall.RawSyscall (/bin/sidecar)
	          91ba90 github.com/cloudwego/netpoll.readv (/bin/sidecar)

sidecar 101 
	ffffffff81e99d8a futex_wake ([kernel.kallsyms])
	ffffffff816d6bf5 __x64_sys_futex ([kernel.kallsyms])
	ffffffff816d6bf6 x64_sys_call ([kernel.kallsyms])
	ffffffff8225a101 do_syscall_64 ([kernel.kallsyms])
	           9994d runtime.futex.abi0 (/bin/sidecar)
	           5b136 runtime.wakep (/bin/sidecar)

sidecar 102 
	             b49 __vdso_clock_gettime ([vdso])
	           99fe0 time.now (/bin/sidecar)
	           facb3 time.Now (/bin/sidecar)
	          92b198 github.com/stormgate/stormgate/proxy.(*session).onRequest (/bin/sidecar)

sidecar 102 
	             b49 __vdso_clock_gettime ([vdso])
	           9994d runtime.nanotime1.abi0 (/bin/sidecar)

sidecar 102 
	          9189d6 github.com/cloudwego/netpoll.(*UnsafeLinkBuffer).book (/bin/sidecar)
	          919cff github.com/cloudwego/netpoll.(*defaultPoll).handler (/bin/sidecar)

sidecar 102 
	ffffffff82256126 clear_page_erms ([kernel.kallsyms])
	ffffffff81000130 asm_exc_page_fault ([kernel.kallsyms])
	          92b198 runtime.mallocgc (/bin/sidecar)

haproxy 7 
	          123456 [unknown] (/usr/sbin/haproxy)

sidecar 103 
	           94463 runtime.findfunc (/bin/sidecar)
	           80447 runtime.isSystemGoroutine (/bin/sidecar)
	           62b85 runtime.newproc1 (/bin/sidecar)
	           6293f runtime.newproc (/bin/sidecar)
	          90f145 github.com/bytedance/gopkg/util/gopool.(*pool).CtxGo (/bin/sidecar)
	          913c95 github.com/cloudwego/netpoll.(*connection).onProcess (/bin/sidecar)

`

func TestPerfSplit(t *testing.T) {
	samples := parsePerfScript(strings.NewReader(perfScriptSample))
	if len(samples) != 8 {
		t.Fatalf("%d samples, want 8", len(samples))
	}
	split, kernel, rt := splitSamples(samples)
	got := map[string]float64{}
	for _, s := range split {
		got[s.Name] = s.Frac * 8
	}
	want := map[string]float64{catKernel: 3, catRuntime: 2, catNetpoll: 1, catSG: 1, catOther: 1}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s: %v samples, want %v (split %+v)", k, got[k], v, split)
		}
	}
	names := map[string]string{}
	for _, k := range kernel {
		names[k.Name] = k.Top
	}
	for name, caller := range map[string]string{"readv": "github.com/cloudwego/netpoll.readv", "futex": "the runtime: scheduler (park, wake, find work)", "page faults": "the runtime: allocation"} {
		if c, ok := names[name]; !ok || c != caller {
			t.Errorf("kernel %q: caller %q (present %v), want %q; all %+v", name, c, ok, caller, kernel)
		}
	}
	for _, s := range split {
		if s.Name == catSG && s.Top != "__vdso_clock_gettime ← github.com/stormgate/stormgate/proxy.(*session).onRequest" {
			t.Errorf("Stormgate's top item %q: a vDSO call is charged to its caller", s.Top)
		}
	}
	// The runtime's part by what it was doing, with who made it do it.
	causes := map[string]string{}
	for _, s := range rt {
		causes[s.Name] = s.Top
	}
	if len(rt) != 2 || causes["runtime.nanotime1.abi0"] != "" || causes["goroutine creation and exit"] != "github.com/bytedance/gopkg/util/gopool.(*pool).CtxGo" {
		t.Errorf("runtime causes %+v", rt)
	}
}

func TestParsePprofTopAndPerfStat(t *testing.T) {
	text := `File: sidecar
Type: cpu
Duration: 8s, Total samples = 1.11s (13.87%)
Showing nodes accounting for 1.11s, 100% of 1.11s total
      flat  flat%   sum%        cum   cum%
     0.67s 60.36% 60.36%      0.67s 60.36%  internal/runtime/syscall/linux.Syscall6
     0.06s  5.41% 65.77%      0.06s  5.41%  github.com/cloudwego/netpoll.(*UnsafeLinkBuffer).book
     0.03s  2.70% 74.77%      0.66s 59.46%  github.com/stormgate/stormgate/proxy.(*session).onRequest
     0.02s  1.80% 80.18%      0.02s  1.80%  runtime.exitsyscall
     0.01s   0.9% 86.49%      0.01s   0.9%  runtime.futex
     0.01s   0.9% 90.99%      0.01s   0.9%  sync.(*Mutex).Lock (inline)
         0     0%   100%      0.70s 63.06%  github.com/bytedance/gopkg/util/gopool.(*worker).run.func1.1
`
	rows, total := parsePprofTop(text)
	if total != 1110*time.Millisecond || len(rows) != 7 || rows[5].Func != "sync.(*Mutex).Lock (inline)" || rows[6].Cum != 700*time.Millisecond {
		t.Fatalf("total %v rows %+v", total, rows)
	}
	got := map[string]float64{}
	for _, s := range pprofSplit(rows, total) {
		got[s.Name] = math.Round(s.Frac * 111)
	}
	if got[catKernel] != 68 || got[catNetpoll] != 6 || got[catSG] != 3 || got[catRuntime] != 2 || got[catOther] != 1 {
		t.Fatalf("pprof split (in 10 ms samples) %v", got)
	}
	st := parsePerfStat("# started on x\n\n48445,,raw_syscalls:sys_enter,3001205777,100.00,,\n2728,,context-switches,3001205777,100.00,10.496,K/sec\n<not counted>,,cycles,0,0.00,,\n")
	if st["raw_syscalls:sys_enter"] != 48445 || st["context-switches"] != 2728 || len(st) != 2 {
		t.Fatalf("perf stat %v", st)
	}
}

func TestParseStatUserSys(t *testing.T) {
	u, s, err := parseStatUserSys("4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 8 0 12345 1000000 500 18446744073709551615")
	if err != nil || u != 250*clockTick || s != 75*clockTick {
		t.Fatalf("user %v sys %v err %v", u, s, err)
	}
}

func TestRunTimeOfSelf(t *testing.T) {
	if _, err := parseSchedstat(""); err == nil {
		t.Fatal("no error for an empty schedstat")
	}
	if v, err := parseSchedstat("370107702 190188910 1537\n"); err != nil || v != 370107702 {
		t.Fatalf("parseSchedstat = %v, %v", v, err)
	}
	a, err := runTime(os.Getpid())
	if err != nil {
		t.Skipf("no schedstat here: %v", err)
	}
	// Spinning must show up as run time (on a loaded machine it may take a while: up to 10 s).
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, err := runTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if b-a >= 20*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s of spinning ran only %v", b-a)
		}
	}
}

// A HAProxy series that failed its first rate bounds the throughput ratio from below.
func TestThroughputRatioLowerBound(t *testing.T) {
	r := fixture(1)
	for i := range r.Throughput.Series {
		se := &r.Throughput.Series[i]
		if se.Target == haproxy && se.Conns == 10000 {
			se.Max, se.Steps = 0, []TPStep{{Rate: 5000, Sent: 1000, OK: 900, Failed: 100}}
		}
	}
	doc := (&reporter{r: r, img: "img"}).markdown()
	want := "| Max throughput, small requests, 10,000 conns: Stormgate ÷ HAProxy | 40,000 req/s | < 5,000 req/s | 20,000 req/s | ≥ 1.2× | > 4.00×: **met** | – |"
	if !strings.Contains(doc, want) {
		t.Errorf("doc lacks %q", want)
	}
}

func TestParseMachineCPU(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	busy, steal, err := parseMachineCPU("cpu  100 5 50 9000 40 3 2 1 7 0\ncpu0 50 2 25 4500 20 1 1 0 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if busy != 160*clockTick || steal != clockTick {
		t.Errorf("busy %v steal %v, want %v (user+nice+system+irq+softirq) and %v", busy, steal, 160*clockTick, clockTick)
	}
	if _, _, err := parseMachineCPU("intr 1 2 3\n"); err == nil {
		t.Error("a /proc/stat without the cpu line parsed")
	}
}

// TestLabelCostPairVerdict: the side-by-side ratio decides the labels' row, and a side-by-side
// run whose calls failed gives no verdict (the machine did not carry the load the row names).
func TestLabelCostPairVerdict(t *testing.T) {
	l := FwdLoad{Conns: 10000, Rate: 5000}
	r := &Results{Forward: &ForwardResult{Rows: []FwdRow{
		{Target: stormgate, Conns: l.Conns, Rate: l.Rate, UsPerReq: []float64{60}},
		{Target: stormgateNoLabels, Conns: l.Conns, Rate: l.Rate, UsPerReq: []float64{50}},
	}}}
	pair := FwdPair{Conns: l.Conns, Rate: l.Rate, With: []float64{41, 42}, Without: []float64{40, 40}, Ratios: []float64{1.025, 1.05}, Sent: 1000}
	r.Forward.Pairs = []FwdPair{pair}
	p := &reporter{r: r, img: "img"}
	if row := p.labelCostRow(l); !row.known || !row.ok || row.verdict != "" {
		t.Errorf("side by side 1.04x (alternating 1.20x): known %v ok %v verdict %q, want met", row.known, row.ok, row.verdict)
	}
	r.Forward.Pairs[0].Failed = 30
	if row := p.labelCostRow(l); row.ok || !strings.HasPrefix(row.verdict, "no verdict: 30 of 1,000 calls failed") {
		t.Errorf("with 30 failed calls: ok %v verdict %q, want no verdict", row.ok, row.verdict)
	}
}
