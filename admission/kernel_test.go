package admission

import (
	"strings"
	"testing"
)

func TestParseNetstat(t *testing.T) {
	in := "TcpExt: SyncookiesSent SyncookiesRecv ListenOverflows ListenDrops TCPReqQFullDoCookies TCPReqQFullDrop TCPSynRetrans\n" +
		"TcpExt: 4 0 17 19 2 3 5\n" +
		"IpExt: InNoRoutes ListenOverflows\n" +
		"IpExt: 1 999\n"
	c, err := parseNetstat([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := ListenCounters{ListenOverflows: 17, ListenDrops: 19, SynRetrans: 5, ReqQFullDrop: 3, ReqQFullDoCookies: 2, SyncookiesSent: 4}
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	if d := want.Sub(ListenCounters{ListenOverflows: 7, ListenDrops: 9}); d.ListenOverflows != 10 || d.ListenDrops != 10 {
		t.Errorf("Sub: %+v", d)
	}
	for _, bad := range []string{"", "TcpExt: ListenOverflows\nTcpExt: 1 2\n", "TcpExt: ListenOverflows\nTcpExt: x\n"} {
		if _, err := parseNetstat([]byte(bad)); err == nil {
			t.Errorf("parseNetstat(%q) succeeded", bad)
		}
	}
}

func TestKernelCountersLive(t *testing.T) {
	if _, err := KernelCounters(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckLimits(t *testing.T) {
	s, err := newSettings(Config{Address: "127.0.0.1:0", Backlog: 65535, MaxConnections: 100000, TCPFastOpen: 16})
	if err != nil {
		t.Fatal(err)
	}
	low := kernelLimits{somaxconn: 4096, maxSynBacklog: 1024, syncookies: 0, tcpFastOpen: 1, nofileCur: 20000, nofileMax: 20000}
	var fixes []string
	for _, w := range checkLimits(s, low) {
		fixes = append(fixes, w.fix)
	}
	all := strings.Join(fixes, "\n")
	for _, want := range []string{
		"sysctl -w net.core.somaxconn=65535",
		"sysctl -w net.ipv4.tcp_max_syn_backlog=65535",
		"sysctl -w net.ipv4.tcp_syncookies=1",
		"ulimit -n 101024",
		"LimitNOFILE=101024",
		"sysctl -w net.ipv4.tcp_fastopen=3",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("fixes lack %q:\n%s", want, all)
		}
	}
	ok := kernelLimits{somaxconn: 65535, maxSynBacklog: 65535, syncookies: 1, tcpFastOpen: 3, nofileCur: 1 << 20, nofileMax: 1 << 20}
	if w := checkLimits(s, ok); len(w) != 0 {
		t.Errorf("warnings with ample limits: %+v", w)
	}
}

func TestNewSettingsZeroValues(t *testing.T) {
	s, err := newSettings(Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Zero means what each field documents: no pacing, no wait, no cap.
	if s.backlog != zeroBacklog || !s.unlimited || s.burst != 1 || s.maxWait != 0 ||
		s.maxConnections != 0 || s.maxPending != zeroMaxPending || s.keepIdleSecs != 0 || s.addr.Port() != 0 {
		t.Errorf("zero Config resolved to %+v", s)
	}
}
