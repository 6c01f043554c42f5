// Package sockets lists established TCP connections from the kernel's tables (/proc/net/tcp and /proc/net/tcp6,
// Linux only), the same view `ss -tn state established` gives, so interop tests can count how many connections
// terminate at each process without relying on the processes' own counters.
//
// One pass over a table is not a snapshot: the kernel hands it out a page per read(2) and finds its place again
// for each page, so while other connections on the machine open and close, a pass can miss a line or repeat one.
// Callers that need an exact set take the union of a few passes (Accepted does), keyed by the connection.
//
// Functions read the tables afresh on every call; they hold no state and are safe for concurrent use.
package sockets

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Conn is one TCP socket (an established connection, or a listener with a zero Remote) seen from its local end.
type Conn struct {
	Local  netip.AddrPort // IPv4-mapped IPv6 addresses are unmapped to IPv4
	Remote netip.AddrPort
	Inode  uint64 // the socket's inode; matches "socket:[inode]" links under /proc/<pid>/fd
}

// Kernel TCP states in the "st" column.
const (
	tcpEstablished = "01"
	tcpListen      = "0A"
)

// Established returns every established TCP connection in this network namespace, IPv4 and IPv6.
func Established() ([]Conn, error) { return inState(tcpEstablished) }

// OwnListening reports whether this process has a listening TCP socket on port (any address).
func OwnListening(port uint16) (bool, error) {
	ls, err := inState(tcpListen)
	if err != nil {
		return false, err
	}
	own, err := ownInodes()
	if err != nil {
		return false, err
	}
	for _, l := range ls {
		if _, mine := own[l.Inode]; mine && l.Local.Port() == port {
			return true, nil
		}
	}
	return false, nil
}

func inState(state string) ([]Conn, error) {
	var all []Conn
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		cs, err := readTable(f, state)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) && strings.HasSuffix(f, "6") {
				continue // IPv6 disabled
			}
			return nil, err
		}
		all = append(all, cs...)
	}
	return all, nil
}

// Key identifies one connection.
type Key struct{ Local, Remote netip.AddrPort }

// Accepted returns the established connections whose local port is port (for a listening port: the
// connections accepted on it, what `ss -tn state established '( sport = :port )'` lists), as the union of
// passes reads of the tables.
func Accepted(port uint16, passes int) (map[Key]struct{}, error) {
	set := map[Key]struct{}{}
	for range max(passes, 1) {
		cs, err := Established()
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if c.Local.Port() == port {
				set[Key{c.Local, c.Remote}] = struct{}{}
			}
		}
	}
	return set, nil
}

// CountLocalPort returns how many distinct established connections have local port port, from the union of
// three passes.
func CountLocalPort(port uint16) (int, error) {
	set, err := Accepted(port, 3)
	return len(set), err
}

// CountOwnTo returns how many established connections this process holds to remote (matched on the sockets'
// inodes against /proc/self/fd).
func CountOwnTo(remote netip.AddrPort) (int, error) {
	own, err := ownInodes()
	if err != nil {
		return 0, err
	}
	cs, err := Established()
	if err != nil {
		return 0, err
	}
	mine := map[uint64]struct{}{}
	for _, c := range cs {
		if _, ok := own[c.Inode]; ok && c.Remote == remote {
			mine[c.Inode] = struct{}{}
		}
	}
	return len(mine), nil
}

func ownInodes() (map[uint64]struct{}, error) {
	links, err := filepath.Glob("/proc/self/fd/*")
	if err != nil {
		return nil, err
	}
	own := make(map[uint64]struct{}, len(links))
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil {
			continue // closed since the glob
		}
		if s, ok := strings.CutPrefix(target, "socket:["); ok {
			if ino, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				own[ino] = struct{}{}
			}
		}
	}
	return own, nil
}

// readTable parses one /proc/net/tcp-format table, keeping the sockets in state.
// Line format: "sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...".
func readTable(path, state string) ([]Conn, error) {
	buf, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Conn
	sc := bufio.NewScanner(bytes.NewReader(buf))
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != state {
			continue
		}
		local, err := parseAddr(fields[1])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		remote, err := parseAddr(fields[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		ino, err := strconv.ParseUint(fields[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: inode %q: %w", path, fields[9], err)
		}
		out = append(out, Conn{Local: local, Remote: remote, Inode: ino})
	}
	return out, sc.Err()
}

// parseAddr decodes "0100007F:1F90" (IPv4) or the 32-hex-digit IPv6 form. The kernel prints the address as
// 32-bit words in host byte order (little endian on every platform this runs on) and the port in big endian hex.
func parseAddr(s string) (netip.AddrPort, error) {
	h, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %w", s, err)
	}
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q: bad host", s)
	}
	for i := 0; i < len(raw); i += 4 { // each 32-bit word is little endian
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
