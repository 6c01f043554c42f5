package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/stormgate/stormgate/internal/childproc"
)

// Proc is one child process started by the Suite. Its stdout and stderr go to a log file in the
// output directory; lines can also be handed to a callback (the load tool's progress lines).
type Proc struct {
	*childproc.Proc
	LogPath string
	argv    []string
	readyRe *regexp.Regexp
}

// procSpec describes a child process.
type procSpec struct {
	name    string
	argv    []string
	netns   string         // run inside this network namespace (ip netns exec)
	readyRe *regexp.Regexp // optional: Ready returns once a stdout/stderr line matches
	onLine  func(string)   // optional: every stdout and stderr line
	bound   time.Duration  // the process is killed after this long; 0 means the suite's default
	env     []string
}

// defaultProcBound is the longest any child may live unless its spec says otherwise.
const defaultProcBound = 10 * time.Minute

// keptLines is how many of a child's newest output lines stay in memory (Ready reads them; the
// log file has them all).
const keptLines = 1000

// start launches a child in its own process group. It is killed when ctx ends, when its bound
// passes, or by Suite.cleanup.
func (s *Suite) start(ctx context.Context, sp procSpec) (*Proc, error) {
	argv := sp.argv
	if sp.netns != "" {
		argv = append([]string{"ip", "netns", "exec", sp.netns}, argv...) // ip execs argv: same pid
	}
	bound := sp.bound
	if bound <= 0 {
		bound = defaultProcBound
	}
	s.mu.Lock()
	s.seq++
	logPath := filepath.Join(s.out, "logs", fmt.Sprintf("%03d-%s.log", s.seq, sp.name))
	s.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "$ %s\n", strings.Join(argv, " "))
	var onLine func(childproc.Line)
	if sp.onLine != nil {
		onLine = func(l childproc.Line) { sp.onLine(l.Text) }
	}
	pctx, cancel := context.WithTimeout(ctx, bound)
	cp, err := childproc.Start(pctx, childproc.Spec{Name: sp.name, Argv: argv, Env: sp.env,
		Group: true, Keep: keptLines, Log: logf, OnLine: onLine})
	if err != nil {
		cancel()
		logf.Close()
		return nil, err
	}
	go func() { // owned by the process: ends when it has exited
		<-cp.Done()
		cancel()
		logf.Close()
	}()
	p := &Proc{Proc: cp, LogPath: logPath, argv: argv, readyRe: sp.readyRe}
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// Command is the command line as typed (for the report).
func (p *Proc) Command() string { return strings.Join(p.argv, " ") }

// Ready waits for the first output line matching the spec's readyRe and returns its submatches.
func (p *Proc) Ready(ctx context.Context, timeout time.Duration) ([]string, error) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var m []string
	_, err := p.WaitLine(wctx, func(l childproc.Line) bool {
		m = p.readyRe.FindStringSubmatch(l.Text)
		return m != nil
	})
	switch {
	case err == nil:
		return m, nil
	case errors.Is(err, childproc.ErrExited):
		return nil, fmt.Errorf("%s exited before it was ready (%v); see %s", p.Name, p.Err(), p.LogPath)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	default:
		return nil, fmt.Errorf("%s not ready after %v; see %s", p.Name, timeout, p.LogPath)
	}
}

// cleanup kills every child still running and waits for it.
func (s *Suite) cleanup() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
}

// Usage is a process's (or a set of processes') CPU time and resident memory at one instant.
type Usage struct {
	At     time.Time
	CPU    time.Duration // utime + stime
	Sys    time.Duration // stime alone: time in the kernel on the process's behalf
	RSSKiB int64
}

// Sub returns the CPU used between b and u and the elapsed time.
func (u Usage) Sub(b Usage) (cpu, elapsed time.Duration) { return u.CPU - b.CPU, u.At.Sub(b.At) }

// clockTick is USER_HZ, the unit of utime/stime in /proc/PID/stat (100 on every Linux ABI Go runs on).
const clockTick = 10 * time.Millisecond

// sampleUsage reads CPU and RSS of the given processes, summed.
func sampleUsage(pids ...int) (Usage, error) {
	u := Usage{At: time.Now()}
	for _, pid := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return u, err
		}
		user, sys, err := parseStatUserSys(string(st))
		if err != nil {
			return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return u, err
		}
		u.CPU += user + sys
		u.Sys += sys
		u.RSSKiB += parseStatusRSS(string(status))
	}
	return u, nil
}

// machineCPU is the whole machine's CPU time so far, from /proc/stat (every core).
type machineCPU struct {
	At    time.Time
	Busy  time.Duration // user, nice, system, irq, softirq: this guest's processes and kernel
	Steal time.Duration // time this guest wanted a core and the hypervisor gave it to another
}

// sampleMachine reads the machine's CPU time (zero on error).
func sampleMachine() machineCPU {
	m := machineCPU{At: time.Now()}
	if st, err := os.ReadFile("/proc/stat"); err == nil {
		m.Busy, m.Steal, _ = parseMachineCPU(string(st))
	}
	return m
}

// cores returns the busy and stolen cores between a and b (1.0 = one core).
func (b machineCPU) cores(a machineCPU) (busy, steal float64) {
	el := b.At.Sub(a.At)
	if el <= 0 {
		return 0, 0
	}
	return float64(b.Busy-a.Busy) / float64(el), float64(b.Steal-a.Steal) / float64(el)
}

// parseMachineCPU returns busy and steal time from the aggregate "cpu" line of /proc/stat: busy
// is user, nice, system, irq and softirq (idle and iowait are not busy; guest time is inside
// user), steal is field 8.
func parseMachineCPU(stat string) (busy, steal time.Duration, err error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, errors.New("/proc/stat: no aggregate cpu line")
	}
	var v [9]uint64
	for i := 1; i < 9; i++ {
		if v[i], err = strconv.ParseUint(f[i], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	return time.Duration(v[1]+v[2]+v[3]+v[6]+v[7]) * clockTick, time.Duration(v[8]) * clockTick, nil
}

// parseStatCPU returns utime+stime from the text of /proc/PID/stat.
func parseStatCPU(stat string) (time.Duration, error) {
	user, sys, err := parseStatUserSys(stat)
	return user + sys, err
}

// parseStatUserSys returns utime and stime from the text of /proc/PID/stat. The command name
// (field 2) is in parentheses and may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatUserSys(stat string) (user, sys time.Duration, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, errors.New("no ')' in stat")
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	if len(f) < 13 {
		return 0, 0, errors.New("short stat")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return time.Duration(ut) * clockTick, time.Duration(st) * clockTick, nil
}

// parseStatusRSS returns VmRSS in KiB from the text of /proc/PID/status (0 if absent).
func parseStatusRSS(status string) int64 {
	for line := range strings.SplitSeq(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, _ := strconv.ParseInt(f[0], 10, 64)
				return v
			}
		}
	}
	return 0
}
