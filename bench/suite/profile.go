package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Profile is what one target's processes spent their CPU on during one window: CPU from /proc
// (user and kernel), system calls and context switches from `perf stat`, a sampled split from
// `perf record` (kernel, Go runtime, netpoll, Stormgate, other), and for Stormgate the top of Go's
// own CPU profile from its admin listener (/debug/pprof/profile).
type Profile struct {
	Scenario string        `json:"scenario"` // the profileKey of the scenario and load
	Target   string        `json:"target"`
	Window   time.Duration `json:"window_ns"`      // of the CPU figures (/proc)
	ProfWin  time.Duration `json:"prof_window_ns"` // of the profilers (perf counts per second use it)
	Ops      float64       `json:"ops"`            // heartbeats or requests in the window; 0 when idle
	OpName   string        `json:"op_name"`        // "heartbeat", "request", or "" when idle
	CPU      time.Duration `json:"cpu_ns"`         // utime+stime over the window (/proc)
	SysCPU   time.Duration `json:"sys_ns"`         // stime alone

	Syscalls    float64 `json:"syscalls"`     // perf stat raw_syscalls:sys_enter; -1 when unknown
	CtxSwitches float64 `json:"ctx_switches"` // perf stat context-switches; -1 when unknown

	PerfSamples int     `json:"perf_samples"`
	Split       []Share `json:"split"`   // by owner of the sampled code (perf)
	Kernel      []Share `json:"kernel"`  // kernel samples by system call (fractions of all samples)
	Runtime     []Share `json:"runtime"` // Go runtime samples by what the runtime was doing

	PprofSamples time.Duration `json:"pprof_total_ns"` // total sampled CPU in the Go profile
	PprofTop     []TopRow      `json:"pprof_top"`      // top 20 by flat time
	PprofSplit   []Share       `json:"pprof_split"`    // the same split estimated from the Go profile

	Files []string `json:"files,omitempty"` // raw profiles kept in the output directory
	Error string   `json:"error,omitempty"`
}

// Share is one part of a split.
type Share struct {
	Name string  `json:"name"`
	Frac float64 `json:"frac"`
	Top  string  `json:"top,omitempty"` // its largest item (a function, or the caller of a system call)
}

// TopRow is one line of `go tool pprof -top`.
type TopRow struct {
	Flat    time.Duration `json:"flat_ns"`
	FlatPct float64       `json:"flat_pct"`
	Cum     time.Duration `json:"cum_ns"`
	CumPct  float64       `json:"cum_pct"`
	Func    string        `json:"func"`
}

// perOp is CPU µs per operation over the profile's window (0 when no ops).
func (p *Profile) perOp(d time.Duration) float64 {
	if p == nil || p.Ops <= 0 {
		return 0
	}
	return float64(d) / 1e3 / p.Ops
}

// perfPerOp is a perf stat count per operation (perf counts over the profilers' window, the
// operations over the CPU window); -1 when unknown.
func (p *Profile) perfPerOp(n float64) float64 {
	if p == nil || n < 0 || p.Ops <= 0 || p.ProfWin <= 0 || p.Window <= 0 {
		return -1
	}
	return (n / p.ProfWin.Seconds()) / (p.Ops / p.Window.Seconds())
}

// perfPerSec is a perf stat count per second; -1 when unknown.
func (p *Profile) perfPerSec(n float64) float64 {
	if p == nil || n < 0 || p.ProfWin <= 0 {
		return -1
	}
	return n / p.ProfWin.Seconds()
}

// Split categories, in the order the doc prints them.
const (
	catKernel  = "kernel"
	catRuntime = "Go runtime"
	catNetpoll = "netpoll"
	catSG      = "Stormgate"
	catOther   = "other user space"
)

var splitOrder = []string{catKernel, catRuntime, catNetpoll, catSG, catOther}

// perfFreq is perf record's sampling frequency (Hz, per thread on CPU).
const perfFreq = 997

// perfWorks reports whether perf can sample and count here (it needs perf_event_open; in a VM
// only software events such as cpu-clock exist, which is all the suite uses).
func perfWorks(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "perf", "stat", "-e", "task-clock,raw_syscalls:sys_enter,context-switches", "true").Run() == nil
}

// profiling is a profile being captured: perf record and perf stat as child processes, and the
// Go profile fetched by a goroutine that finish waits for.
type profiling struct {
	s        *Suite
	name     string
	secs     int
	rec      *Proc
	stat     *Proc
	recFile  string
	statFile string

	pprofFile string
	pprofWG   sync.WaitGroup
	pprofErr  error
	startErr  []string
}

// startProfile starts profiling px's processes for d (whole seconds: the Go profile's unit).
// Nothing it starts outlives finish or the suite's cleanup.
func (s *Suite) startProfile(ctx context.Context, name string, px *proxy, d time.Duration) *profiling {
	p := &profiling{s: s, name: name, secs: max(1, int(d.Round(time.Second)/time.Second))}
	dir := filepath.Join(s.out, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.startErr = append(p.startErr, err.Error())
		return p
	}
	secs := p.secs
	var pids []string
	for _, id := range px.pids() {
		pids = append(pids, strconv.Itoa(id))
	}
	if s.perf && len(pids) > 0 {
		p.recFile = filepath.Join(dir, name+".perf.data")
		p.statFile = filepath.Join(dir, name+".perf-stat.csv")
		var err error
		p.rec, err = s.start(ctx, procSpec{name: "perf-record-" + name, bound: d + time.Minute,
			argv: []string{"perf", "record", "-q", "-e", "cpu-clock", "-F", strconv.Itoa(perfFreq), "-g",
				"-p", strings.Join(pids, ","), "-o", p.recFile, "--", "sleep", strconv.Itoa(secs)}})
		if err != nil {
			p.startErr = append(p.startErr, err.Error())
		}
		p.stat, err = s.start(ctx, procSpec{name: "perf-stat-" + name, bound: d + time.Minute,
			argv: []string{"perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter,context-switches",
				"-p", strings.Join(pids, ","), "-o", p.statFile, "--", "sleep", strconv.Itoa(secs)}})
		if err != nil {
			p.startErr = append(p.startErr, err.Error())
		}
	}
	if px.admin != "" {
		p.pprofFile = filepath.Join(dir, name+".pprof.pb.gz")
		p.pprofWG.Go(func() {
			p.pprofErr = fetchPprof(ctx, px.admin, secs, p.pprofFile)
		})
	}
	return p
}

// fetchPprof saves Go's CPU profile over secs seconds from the admin listener at addr.
func fetchPprof(ctx context.Context, addr string, secs int, path string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// finish waits for the profilers and fills in what they captured (the caller sets the window's
// CPU and operations). Parsing runs here, after the window, so it costs the window nothing.
func (p *profiling) finish(ctx context.Context, prof *Profile) {
	errs := p.startErr
	prof.ProfWin = time.Duration(p.secs) * time.Second
	prof.Syscalls, prof.CtxSwitches = -1, -1
	if p.rec != nil {
		if err := p.rec.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("perf record: %v (see %s)", err, p.rec.LogPath))
		} else {
			samples, err := perfSamples(ctx, p.recFile)
			if err != nil {
				errs = append(errs, err.Error())
			}
			prof.PerfSamples = len(samples)
			prof.Split, prof.Kernel, prof.Runtime = splitSamples(samples)
			prof.Files = append(prof.Files, p.recFile)
		}
	}
	if p.stat != nil {
		if err := p.stat.Wait(); err != nil {
			errs = append(errs, fmt.Sprintf("perf stat: %v (see %s)", err, p.stat.LogPath))
		} else if b, err := os.ReadFile(p.statFile); err != nil {
			errs = append(errs, err.Error())
		} else {
			c := parsePerfStat(string(b))
			if v, ok := c["raw_syscalls:sys_enter"]; ok {
				prof.Syscalls = v
			}
			if v, ok := c["context-switches"]; ok {
				prof.CtxSwitches = v
			}
		}
	}
	if p.pprofFile != "" {
		p.pprofWG.Wait()
		if p.pprofErr != nil {
			errs = append(errs, "pprof: "+p.pprofErr.Error())
		} else {
			rows, total, err := pprofTop(ctx, p.pprofFile)
			if err != nil {
				errs = append(errs, err.Error())
			}
			prof.PprofSamples = total
			prof.PprofSplit = pprofSplit(rows, total)
			if len(rows) > 20 {
				rows = rows[:20]
			}
			prof.PprofTop = rows
			prof.Files = append(prof.Files, p.pprofFile)
		}
	}
	if len(errs) > 0 {
		prof.Error = strings.Join(errs, "; ")
		p.s.logf("  profile %s: %s", p.name, prof.Error)
	}
}

// --- perf record: samples and their split ---

// frame is one line of a perf call chain.
type frame struct {
	sym, dso string
}

func (f frame) kernel() bool { return strings.HasPrefix(f.dso, "[kernel") }

// perfSamples reads the call chains of a perf.data file (innermost frame first).
func perfSamples(ctx context.Context, path string) ([][]frame, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "perf", "script", "-i", path, "-F", "comm,tid,ip,sym,dso", "--no-inline")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	samples := parsePerfScript(out)
	if err := cmd.Wait(); err != nil {
		return samples, fmt.Errorf("perf script -i %s: %w", path, err)
	}
	return samples, nil
}

// parsePerfScript parses `perf script -F comm,tid,ip,sym,dso` output: a line naming the thread,
// then one indented line per frame ("addr symbol (dso)"), then a blank line.
func parsePerfScript(r io.Reader) [][]frame {
	var out [][]frame
	var cur []frame
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	flush := func() {
		if len(cur) > 0 {
			out = append(out, cur)
		}
		cur = nil
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		if line[0] != ' ' && line[0] != '\t' { // a new sample's header
			flush()
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		fr := frame{sym: "[unknown]"}
		last := f[len(f)-1]
		if strings.HasPrefix(last, "(") && strings.HasSuffix(last, ")") {
			fr.dso = strings.TrimSuffix(strings.TrimPrefix(last, "("), ")")
			f = f[:len(f)-1]
		}
		if len(f) > 1 {
			fr.sym = strings.Join(f[1:], " ")
		}
		cur = append(cur, fr)
	}
	flush()
	return out
}

// owner names whose code a Go symbol is: the runtime, netpoll (with the goroutine pool it runs
// handlers on), Stormgate, or "" for everything else (the standard library, other modules,
// unknown), which is charged to the nearest caller that has an owner.
func owner(sym string) string {
	switch {
	case strings.HasPrefix(sym, "runtime.") || strings.HasPrefix(sym, "internal/runtime/") ||
		strings.HasPrefix(sym, "runtime/") || strings.HasPrefix(sym, "gcWriteBarrier"):
		return catRuntime
	case strings.HasPrefix(sym, "github.com/cloudwego/netpoll") || strings.HasPrefix(sym, "github.com/bytedance/gopkg"):
		return catNetpoll
	case strings.HasPrefix(sym, "github.com/stormgate/stormgate"):
		return catSG
	}
	return ""
}

// syscallStub reports Go functions that only enter the kernel: their callers own the call.
func syscallStub(sym string) bool {
	switch sym {
	case "internal/runtime/syscall/linux.Syscall6", "internal/runtime/syscall.Syscall6",
		"syscall.Syscall", "syscall.Syscall6", "syscall.RawSyscall", "syscall.RawSyscall6",
		"syscall.rawSyscallNoError", "syscall.rawVforkSyscall":
		return true
	}
	return strings.HasPrefix(sym, "golang.org/x/sys/unix.") && (strings.Contains(sym, "Syscall") || strings.Contains(sym, "syscall"))
}

// userOwner returns the owner of a user-space chain: the first frame that has one.
func userOwner(chain []frame) (string, string) {
	for _, f := range chain {
		if f.kernel() || f.dso == "[vdso]" || syscallStub(f.sym) {
			continue
		}
		if o := owner(f.sym); o != "" {
			return o, f.sym
		}
	}
	for _, f := range chain {
		if !f.kernel() && f.dso != "[vdso]" {
			return catOther, f.sym
		}
	}
	return catOther, "[unknown]"
}

// Names of kernel time that is not the target's own work or not in a system call.
const (
	kernPerfTrace = "entering a system call under perf stat's tracepoint (profiled window only)"
	kernExit      = "returning to user space (rescheduling, signals)"
)

// syscallName finds the system call a kernel chain is in: the frame called by do_syscall_64
// (skipping the dispatch table), normalized ("do_readv" → "readv", "__x64_sys_epoll_wait" →
// "epoll_wait"). A chain outside any system call is named by its outermost kernel frame.
func syscallName(chain []frame) string {
	outer := ""
	for i, f := range chain {
		if !f.kernel() {
			break
		}
		outer = f.sym
		if f.sym == "do_syscall_64" {
			for j := i - 1; j >= 0; j-- {
				s := chain[j].sym
				switch {
				case s == "x64_sys_call" || strings.HasPrefix(s, "__pfx"):
					continue
				case s == "syscall_trace_enter" || strings.Contains(s, "trace_sys_enter"):
					return kernPerfTrace
				case strings.Contains(s, "exit_to_user_mode") || strings.Contains(s, "syscall_exit"):
					return kernExit
				}
				return normSyscall(s)
			}
		}
	}
	switch {
	case outer == "syscall_trace_enter" || strings.Contains(outer, "trace_sys_enter"):
		return kernPerfTrace
	case strings.Contains(outer, "exit_to_user_mode") || strings.Contains(outer, "syscall_exit"):
		return kernExit
	case strings.HasPrefix(outer, "entry_SYSCALL"):
		return "entering the kernel (system call entry code)"
	case strings.Contains(outer, "page_fault"):
		return "page faults"
	case strings.HasPrefix(outer, "asm_sysvec") || strings.Contains(outer, "irq") || strings.Contains(outer, "interrupt"):
		return "interrupts (timer, softirq)"
	case outer == "":
		return "?"
	}
	return "outside system calls (" + outer + ")"
}

func normSyscall(s string) string {
	for _, p := range []string{"__x64_sys_", "__ia32_sys_", "__se_sys_", "__do_sys_", "ksys_", "__sys_", "do_sys_", "do_"} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			s = rest
			break
		}
	}
	return s
}

// runtimeCauses name what the Go runtime is doing, by a function on the sample's call chain;
// the first rule matching the innermost frame that matches any rule wins (a GC assist inside an
// allocation is GC).
var runtimeCauses = []struct {
	label string
	funcs []string
}{
	{"GC (marking, sweeping, assists)", []string{"runtime.gcBgMarkWorker", "runtime.gcDrain", "runtime.gcAssistAlloc", "runtime.scanobject",
		"runtime.markroot", "runtime.bgsweep", "runtime.sweepone", "runtime.gcStart", "runtime.bgscavenge", "runtime.gcMarkDone", "runtime.scanstack"}},
	{"stack growth (morestack, copystack)", []string{"runtime.newstack", "runtime.copystack", "runtime.morestack"}},
	{"goroutine creation and exit", []string{"runtime.newproc", "runtime.goexit0", "runtime.gfget", "runtime.gfput", "runtime.malg"}},
	{"allocation", []string{"runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.rawstring"}},
	{"the Go profiler's signals (SIGPROF)", []string{"runtime.sigprof", "runtime.sighandler", "runtime.sigtramp", "runtime.sigtrampgo"}},
	{"system call entry and exit", []string{"runtime.entersyscall", "runtime.exitsyscall", "runtime.reentersyscall"}},
	{"timers", []string{"runtime.runtimer", "runtime.(*timers)", "runtime.(*timer)", "runtime.checkTimers", "runtime.resetForSleep", "time.Sleep"}},
	{"runtime netpoller", []string{"runtime.netpoll"}},
	{"sysmon", []string{"runtime.sysmon"}},
	{"scheduler (park, wake, find work)", []string{"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.goready", "runtime.ready",
		"runtime.wakep", "runtime.startm", "runtime.stopm", "runtime.mPark", "runtime.notesleep", "runtime.notewakeup", "runtime.gopark",
		"runtime.goschedImpl", "runtime.mcall", "runtime.handoffp", "runtime.injectglist", "runtime.runqgrab", "runtime.stealWork"}},
	{"channels and select", []string{"runtime.chansend", "runtime.chanrecv", "runtime.selectgo", "runtime.closechan"}},
	{"maps", []string{"runtime.mapaccess", "runtime.mapassign", "runtime.mapdelete", "internal/runtime/maps."}},
	{"memory copies and clears", []string{"runtime.memmove", "runtime.memclr", "runtime.memequal", "runtime.typedmemmove"}},
	{"locks and atomics", []string{"runtime.lock", "runtime.unlock", "internal/runtime/atomic", "runtime.procyield", "runtime.osyield"}},
}

// runtimeCause names what a runtime sample's chain was doing (its leaf when no rule matches).
func runtimeCause(chain []frame) string {
	for _, f := range chain {
		for _, c := range runtimeCauses {
			for _, fn := range c.funcs {
				if strings.HasPrefix(f.sym, fn) {
					return c.label
				}
			}
		}
	}
	for _, f := range chain {
		if owner(f.sym) == catRuntime {
			return f.sym
		}
	}
	return chain[0].sym
}

// kernelCaller names who made a kernel sample's call: its first user frame with an owner, or,
// when that is the runtime, the netpoll or Stormgate code behind it ("… via the runtime's
// scheduler") or the runtime's own activity ("the runtime's sysmon").
func kernelCaller(chain []frame) string {
	o, caller := userOwner(chain)
	if o != catRuntime {
		return caller
	}
	var user []frame
	for _, f := range chain {
		if !f.kernel() {
			user = append(user, f)
		}
	}
	if len(user) == 0 {
		return caller
	}
	cause := runtimeCause(user)
	if who := instigator(user); who != "" {
		return who + " via the runtime (" + cause + ")"
	}
	return "the runtime: " + cause
}

// instigator is the first frame of a chain owned by netpoll or Stormgate: who made the runtime
// (or the kernel) do the work; "" when the chain has none (a runtime thread of its own).
func instigator(chain []frame) string {
	for _, f := range chain {
		if o := owner(f.sym); o == catNetpoll || o == catSG {
			return f.sym
		}
	}
	return ""
}

// splitSamples splits samples by owner (kernel, Go runtime, netpoll, Stormgate, other), the
// kernel's part by system call and the runtime's by what it was doing; each share names its
// largest item (for the runtime: its most common instigator in netpoll or Stormgate).
func splitSamples(samples [][]frame) (split, kernel, rt []Share) {
	if len(samples) == 0 {
		return nil, nil, nil
	}
	n := float64(len(samples))
	cat := map[string]int{}
	catTop := map[string]map[string]int{}
	sys := map[string]int{}
	sysTop := map[string]map[string]int{}
	rtCause := map[string]int{}
	rtTop := map[string]map[string]int{}
	bump := func(m map[string]map[string]int, k, item string) {
		if m[k] == nil {
			m[k] = map[string]int{}
		}
		m[k][item]++
	}
	for _, ch := range samples {
		if ch[0].kernel() {
			cat[catKernel]++
			name := syscallName(ch)
			sys[name]++
			bump(sysTop, name, kernelCaller(ch))
			bump(catTop, catKernel, name)
			continue
		}
		leaf := ch[0]
		o := owner(leaf.sym)
		item := leaf.sym
		if o == "" || leaf.dso == "[vdso]" || syscallStub(leaf.sym) {
			o, item = userOwner(ch)
			item = leaf.sym + " ← " + item
		}
		cat[o]++
		bump(catTop, o, item)
		if o == catRuntime {
			cause := runtimeCause(ch)
			rtCause[cause]++
			if who := instigator(ch); who != "" {
				bump(rtTop, cause, who)
			}
		}
	}
	for _, c := range splitOrder {
		split = append(split, Share{Name: c, Frac: float64(cat[c]) / n, Top: topItem(catTop[c])})
	}
	for name, k := range sys {
		kernel = append(kernel, Share{Name: name, Frac: float64(k) / n, Top: topItem(sysTop[name])})
	}
	for name, k := range rtCause {
		rt = append(rt, Share{Name: name, Frac: float64(k) / n, Top: topItem(rtTop[name])})
	}
	sortShares(kernel)
	sortShares(rt)
	return split, kernel, rt
}

// sortShares orders shares largest first (by name among equals).
func sortShares(s []Share) {
	slices.SortFunc(s, func(a, b Share) int {
		if a.Frac != b.Frac {
			if a.Frac > b.Frac {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

func topItem(m map[string]int) string {
	best, bn := "", 0
	for k, v := range m {
		if v > bn || (v == bn && k < best) {
			best, bn = k, v
		}
	}
	return best
}

// --- perf stat ---

// parsePerfStat parses `perf stat -x ,` output: "value,unit,event,..." per counter.
func parsePerfStat(text string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue // "<not counted>", "<not supported>"
		}
		out[f[2]] = v
	}
	return out
}

// --- Go's CPU profile ---

// pprofTop runs `go tool pprof -top` over a saved profile and returns every function by flat
// time, and the total sampled time.
func pprofTop(ctx context.Context, path string) ([]TopRow, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=100000",
		"-nodefraction=0", "-edgefraction=0", path).CombinedOutput()
	if err != nil {
		return nil, 0, fmt.Errorf("go tool pprof -top %s: %v: %s", path, err, oneLine(string(out)))
	}
	rows, total := parsePprofTop(string(out))
	return rows, total, nil
}

// parsePprofTop parses `go tool pprof -top` text: the "Total samples = X" header and rows of
// "flat flat% sum% cum cum% function".
func parsePprofTop(text string) ([]TopRow, time.Duration) {
	var rows []TopRow
	var total time.Duration
	for line := range strings.SplitSeq(text, "\n") {
		if _, after, ok := strings.Cut(line, "Total samples = "); ok {
			f := strings.Fields(after)
			if len(f) > 0 {
				total, _ = time.ParseDuration(f[0])
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		flat, err1 := time.ParseDuration(f[0])
		cum, err2 := time.ParseDuration(f[3])
		fp, err3 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cp, err4 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		rows = append(rows, TopRow{Flat: flat, FlatPct: fp, Cum: cum, CumPct: cp, Func: strings.Join(f[5:], " ")})
	}
	return rows, total
}

// pprofSplit estimates the split from flat times alone: a function that only enters the kernel
// counts as kernel (Go's profiler charges time in a system call to it), the rest by owner; a
// function with no owner (the standard library) counts as other, since -top has no callers.
func pprofSplit(rows []TopRow, total time.Duration) []Share {
	if total <= 0 {
		return nil
	}
	by := map[string]time.Duration{}
	top := map[string]string{}
	for _, r := range rows {
		c := owner(r.Func)
		switch {
		case syscallStub(r.Func) || goSyscallLeaf(r.Func):
			c = catKernel
		case c == "":
			c = catOther
		}
		if _, ok := top[c]; !ok {
			top[c] = r.Func // rows come sorted by flat time
		}
		by[c] += r.Flat
	}
	var out []Share
	for _, c := range splitOrder {
		out = append(out, Share{Name: c, Frac: float64(by[c]) / float64(total), Top: top[c]})
	}
	return out
}

// goSyscallLeaf reports the runtime's own system call wrappers (assembly that enters the kernel).
func goSyscallLeaf(fn string) bool {
	switch strings.TrimSuffix(fn, ".abi0") {
	case "runtime.futex", "runtime.epollwait", "runtime.usleep", "runtime.nanosleep", "runtime.write1",
		"runtime.read", "runtime.madvise", "runtime.mmap", "runtime.munmap", "runtime.osyield",
		"runtime.tgkill", "runtime.rtsigprocmask", "runtime.sigaltstack", "runtime.setitimer",
		"runtime.timer_settime", "runtime.getpid", "runtime.raiseproc", "runtime.clone", "runtime.sched_getaffinity":
		return true
	}
	return false
}
