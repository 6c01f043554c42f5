package testkit

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// DiagSockets lists this process's open sock_diag netlink sockets ("fd -> socket:[inode]"): proxy's
// tests of its sock_diag watcher count them, and the handover tests' child checks that none crossed
// the exec.
func DiagSockets() ([]string, error) {
	b, err := os.ReadFile("/proc/self/net/netlink") // sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
	if err != nil {
		return nil, err
	}
	diag := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 10 && f[1] == strconv.Itoa(unix.NETLINK_SOCK_DIAG) {
			diag["socket:["+f[9]+"]"] = true
		}
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && diag[l] {
			out = append(out, e.Name()+" -> "+l)
		}
	}
	return out, nil
}
