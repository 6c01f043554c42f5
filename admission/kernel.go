package admission

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ListenCounters are the TcpExt counters from /proc/net/netstat that tell whether the kernel
// dropped or reset handshakes during a connection storm. They are per network namespace
// (not per listener) and monotonic; compare two readings.
type ListenCounters struct {
	ListenOverflows        uint64 // accept queue full when a handshake completed
	ListenDrops            uint64 // any drop on a listener (includes overflows)
	SynRetrans             uint64 // TCPSynRetrans: SYNs our side retransmitted (client side of a storm)
	ReqQFullDrop           uint64 // TCPReqQFullDrop: SYN dropped, SYN queue full, no syncookies
	ReqQFullDoCookies      uint64 // TCPReqQFullDoCookies: SYN queue full, answered with a syncookie
	SyncookiesSent         uint64
	FastOpenListenOverflow uint64 // TCPFastOpenListenOverflow
}

// Sub returns c - base, field by field (the deltas between two readings).
func (c ListenCounters) Sub(base ListenCounters) ListenCounters {
	return ListenCounters{
		ListenOverflows:        c.ListenOverflows - base.ListenOverflows,
		ListenDrops:            c.ListenDrops - base.ListenDrops,
		SynRetrans:             c.SynRetrans - base.SynRetrans,
		ReqQFullDrop:           c.ReqQFullDrop - base.ReqQFullDrop,
		ReqQFullDoCookies:      c.ReqQFullDoCookies - base.ReqQFullDoCookies,
		SyncookiesSent:         c.SyncookiesSent - base.SyncookiesSent,
		FastOpenListenOverflow: c.FastOpenListenOverflow - base.FastOpenListenOverflow,
	}
}

// KernelCounters reads the listen counters of the calling process's network namespace.
func KernelCounters() (ListenCounters, error) {
	b, err := os.ReadFile("/proc/net/netstat")
	if err != nil {
		return ListenCounters{}, err
	}
	return parseNetstat(b)
}

// parseNetstat parses /proc/net/netstat: pairs of lines "TcpExt: names..." / "TcpExt: values...".
func parseNetstat(b []byte) (ListenCounters, error) {
	var c ListenCounters
	fields := map[string]*uint64{
		"ListenOverflows":           &c.ListenOverflows,
		"ListenDrops":               &c.ListenDrops,
		"TCPSynRetrans":             &c.SynRetrans,
		"TCPReqQFullDrop":           &c.ReqQFullDrop,
		"TCPReqQFullDoCookies":      &c.ReqQFullDoCookies,
		"SyncookiesSent":            &c.SyncookiesSent,
		"TCPFastOpenListenOverflow": &c.FastOpenListenOverflow,
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 8192), 1<<20)
	var names []string
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "TcpExt:") {
			names = nil
			continue
		}
		f := strings.Fields(line)[1:]
		if names == nil {
			names = f
			continue
		}
		if len(f) != len(names) {
			return c, fmt.Errorf("admission: /proc/net/netstat: TcpExt has %d names and %d values", len(names), len(f))
		}
		for i, n := range names {
			if p, ok := fields[n]; ok {
				v, err := strconv.ParseUint(f[i], 10, 64)
				if err != nil {
					return c, fmt.Errorf("admission: /proc/net/netstat: %s: %w", n, err)
				}
				*p = v
				if n == "ListenOverflows" {
					found = true
				}
			}
		}
		names = nil
	}
	if err := sc.Err(); err != nil {
		return c, err
	}
	if !found {
		return c, fmt.Errorf("admission: /proc/net/netstat: no TcpExt ListenOverflows")
	}
	return c, nil
}

// readSysctl reads an integer from /proc/sys (of the calling process's network namespace
// for net.* keys). name is the dotted sysctl name.
func readSysctl(name string) (int64, error) {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// listenQueue returns the current accept queue length and its limit of a listening socket
// (TCP_INFO on a listener: tcpi_unacked is sk_ack_backlog, tcpi_sacked is sk_max_ack_backlog).
func listenQueue(fd int) (length, limit uint32, err error) {
	ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return 0, 0, err
	}
	return ti.Unacked, ti.Sacked, nil
}

// kernelLimits are the host limits that bound what the settings can get.
type kernelLimits struct {
	somaxconn       int64 // -1 when unreadable
	maxSynBacklog   int64
	syncookies      int64
	tcpFastOpen     int64
	nofileCur       uint64
	nofileMax       uint64
	nofileReadError error
}

func readKernelLimits() kernelLimits {
	k := kernelLimits{somaxconn: -1, maxSynBacklog: -1, syncookies: -1, tcpFastOpen: -1}
	if v, err := readSysctl("net.core.somaxconn"); err == nil {
		k.somaxconn = v
	}
	if v, err := readSysctl("net.ipv4.tcp_max_syn_backlog"); err == nil {
		k.maxSynBacklog = v
	}
	if v, err := readSysctl("net.ipv4.tcp_syncookies"); err == nil {
		k.syncookies = v
	}
	if v, err := readSysctl("net.ipv4.tcp_fastopen"); err == nil {
		k.tcpFastOpen = v
	}
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil {
		k.nofileCur, k.nofileMax = rl.Cur, rl.Max
	} else {
		k.nofileReadError = err
	}
	return k
}

// limitWarning is one kernel or process limit below what the settings ask for, with the
// command that fixes it.
type limitWarning struct {
	msg string
	fix string
}

// checkLimits compares the settings with the kernel limits. Pure, so tests drive it.
func checkLimits(s *settings, k kernelLimits) []limitWarning {
	var w []limitWarning
	if k.somaxconn >= 0 && int64(s.backlog) > k.somaxconn {
		w = append(w, limitWarning{
			msg: fmt.Sprintf("net.core.somaxconn=%d caps the listen backlog below the configured %d", k.somaxconn, s.backlog),
			fix: fmt.Sprintf("sysctl -w net.core.somaxconn=%d", s.backlog),
		})
	}
	// The SYN queue is bounded by the backlog too; tcp_max_syn_backlog matters when it is lower
	// (without syncookies SYNs are dropped once the SYN queue passes 3/4 of it).
	if k.maxSynBacklog >= 0 && int64(s.backlog) > k.maxSynBacklog {
		want := int64(s.backlog)
		if k.somaxconn >= 0 {
			want = min(want, k.somaxconn)
		}
		if want > k.maxSynBacklog {
			w = append(w, limitWarning{
				msg: fmt.Sprintf("net.ipv4.tcp_max_syn_backlog=%d is below the effective backlog %d", k.maxSynBacklog, want),
				fix: fmt.Sprintf("sysctl -w net.ipv4.tcp_max_syn_backlog=%d", s.backlog),
			})
		}
	}
	if k.syncookies == 0 {
		w = append(w, limitWarning{
			msg: "net.ipv4.tcp_syncookies=0: a full SYN queue drops handshakes",
			fix: "sysctl -w net.ipv4.tcp_syncookies=1",
		})
	}
	if need := s.fdsNeeded(); need > 0 && k.nofileReadError == nil && k.nofileCur < need {
		w = append(w, limitWarning{
			msg: fmt.Sprintf("RLIMIT_NOFILE=%d (hard %d) is below the %d fds that MaxConnections=%d needs", k.nofileCur, k.nofileMax, need, s.maxConnections),
			fix: fmt.Sprintf("ulimit -n %d (systemd: LimitNOFILE=%d; docker: --ulimit nofile=%d:%d)", need, need, need, need),
		})
	}
	if s.cfg.TCPFastOpen > 0 && k.tcpFastOpen >= 0 && k.tcpFastOpen&2 == 0 {
		w = append(w, limitWarning{
			msg: fmt.Sprintf("net.ipv4.tcp_fastopen=%d has no server bit: admission.tcp_fastopen=%d has no effect", k.tcpFastOpen, s.cfg.TCPFastOpen),
			fix: fmt.Sprintf("sysctl -w net.ipv4.tcp_fastopen=%d (or admission.tcp_fastopen: 0 if your consumers do not use TCP Fast Open)", k.tcpFastOpen|3),
		})
	}
	return w
}
