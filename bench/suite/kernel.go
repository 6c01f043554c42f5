package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stormgate/stormgate/internal/netns"
)

// netstat reads the TcpExt counters (ListenOverflows, ListenDrops, TCPSynRetrans, ...) of the
// network namespace that process pid lives in.
func netstat(pid int) (map[string]uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/netstat", pid))
	if err != nil {
		return nil, err
	}
	return parseNetstat(string(b), "TcpExt")
}

// parseNetstat parses /proc/net/netstat's pairs of lines ("Prefix: names..." then
// "Prefix: values...") and returns the counters of the given prefix.
func parseNetstat(text, prefix string) (map[string]uint64, error) {
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, ok1 := strings.CutPrefix(lines[i], prefix+":")
		vals, ok2 := strings.CutPrefix(lines[i+1], prefix+":")
		if !ok1 || !ok2 {
			continue
		}
		n, v := strings.Fields(names), strings.Fields(vals)
		if len(n) != len(v) {
			return nil, fmt.Errorf("netstat: %s: %d names, %d values", prefix, len(n), len(v))
		}
		out := make(map[string]uint64, len(n))
		for j := range n {
			x, err := strconv.ParseUint(v[j], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("netstat: %s %s: %w", prefix, n[j], err)
			}
			out[n[j]] = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("netstat: no %s lines", prefix)
}

// counterDelta returns after[k]-before[k] for each key (0 when a counter went missing).
func counterDelta(before, after map[string]uint64, keys ...string) map[string]uint64 {
	out := make(map[string]uint64, len(keys))
	for _, k := range keys {
		if a, b := after[k], before[k]; a >= b {
			out[k] = a - b
		}
	}
	return out
}

// tcpState counts sockets in the network namespace of pid that are in state st (hex, as in
// /proc/net/tcp: "0A" LISTEN, "01" ESTABLISHED) with the given local port (or, if remote, the
// given remote port).
func tcpState(pid int, st string, port int, remote bool) (int, error) {
	n := 0
	for _, f := range []string{"tcp", "tcp6"} {
		fh, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(fh)
		sc.Scan() // header
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 4 || fl[3] != st {
				continue
			}
			addr := fl[1]
			if remote {
				addr = fl[2]
			}
			j := strings.LastIndexByte(addr, ':')
			p, err := strconv.ParseUint(addr[j+1:], 16, 16)
			if err == nil && int(p) == port {
				n++
			}
		}
		fh.Close()
	}
	return n, nil
}

// waitFor polls cond every 20 ms until it is true, the process dies, or the timeout passes.
func waitFor(ctx context.Context, p *Proc, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited while waiting for %s (%v); see %s", p.Name, what, p.Err(), p.LogPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitListening waits until n sockets listen on port in p's namespace.
func waitListening(ctx context.Context, p *Proc, port, n int) error {
	return waitFor(ctx, p, 30*time.Second, fmt.Sprintf("%s listening on port %d", p.Name, port), func() bool {
		c, err := tcpState(p.PID, "0A", port, false)
		return err == nil && c >= n
	})
}

// stormNetns is the network namespace the storm scenario creates, with its own somaxconn.
type stormNetns struct{ *netns.Namespace }

func createNetns(ctx context.Context, name string, somaxconn int) (*stormNetns, error) {
	_ = (&netns.Namespace{Name: name}).Remove() // a leftover of a killed run
	ns, err := netns.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	if _, err := ns.Exec(ctx, "sysctl", "-q", "-w", fmt.Sprintf("net.core.somaxconn=%d", somaxconn)); err != nil {
		_ = ns.Remove()
		return nil, err
	}
	return &stormNetns{ns}, nil
}

// sysctl reads a sysctl inside the namespace ("?" if it cannot).
func (ns *stormNetns) sysctl(ctx context.Context, name string) string {
	out, err := ns.Exec(ctx, "sysctl", "-n", name)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(out)
}
