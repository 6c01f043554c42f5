package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// machineInfo describes the machine and the versions under test.
func machineInfo(ctx context.Context, s *Suite) Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if x := regexp.MustCompile(`(?m)^model name\s*:\s*(.+)$`).FindStringSubmatch(string(b)); x != nil {
			m.CPUModel = strings.TrimSpace(x[1])
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if x := regexp.MustCompile(`(?m)^MemTotal:\s*(\d+) kB`).FindStringSubmatch(string(b)); x != nil {
			kb, _ := strconv.ParseInt(x[1], 10, 64)
			m.MemGiB = int((kb + 512<<10) >> 20)
		}
	}
	m.Kernel = readTrim("/proc/sys/kernel/osrelease")
	m.Somaxconn = readTrim("/proc/sys/net/core/somaxconn")
	m.LoadAvgPre = loadAvg()
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		m.NoFile = strconv.FormatUint(lim.Cur, 10)
	}
	if s.bins.haproxy != "" {
		if out, err := exec.CommandContext(ctx, s.bins.haproxy, "-v").Output(); err == nil {
			if x := regexp.MustCompile(`version (\S+)`).FindStringSubmatch(string(out)); x != nil {
				m.HAProxy = x[1]
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(s.root, "interop", "go.mod")); err == nil {
		if x := regexp.MustCompile(`dubbo\.apache\.org/dubbo-go/v3 (v\S+)`).FindStringSubmatch(string(b)); x != nil {
			m.DubboGo = x[1]
		}
	}
	if out, err := exec.CommandContext(ctx, "perf", "--version").Output(); err == nil {
		m.PerfVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "perf version ")
	}
	if out, err := exec.CommandContext(ctx, "gcc", "-dumpfullversion").Output(); err == nil {
		m.GCC = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", s.root, "describe", "--always", "--dirty").Output(); err == nil {
		m.Stormgate = strings.TrimSpace(string(out))
	}
	return m
}

// loadAvg is the 1, 5 and 15 minute load averages.
func loadAvg() string {
	f := strings.Fields(readTrim("/proc/loadavg"))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
