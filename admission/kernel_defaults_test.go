package admission

import (
	"strings"
	"testing"
)

// The shipped default must not warn on a stock kernel (net.ipv4.tcp_fastopen=1:
// client side only). Dubbo consumers (Java NIO or Netty, dubbo-go) do not send
// TFO SYNs, so a listener-side TFO queue buys them nothing; the default is off
// and the warning is kept for an operator who turns it on explicitly.
func TestDefaultFastOpenQuietOnStockKernel(t *testing.T) {
	stock := kernelLimits{somaxconn: 65535, maxSynBacklog: 65535, syncookies: 1, tcpFastOpen: 1, nofileCur: 1 << 20, nofileMax: 1 << 20}
	const tfo = 0 // settings.Defaults (settings.TestShippedFastOpenIsOff keeps them equal)
	s, err := newSettings(Config{Address: "127.0.0.1:0", TCPFastOpen: tfo})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range checkLimits(s, stock) {
		if strings.Contains(w.msg, "tcp_fastopen") {
			t.Errorf("default admission.tcp_fastopen=%d warns on a stock kernel: %s", tfo, w.msg)
		}
	}
	s, err = newSettings(Config{Address: "127.0.0.1:0", TCPFastOpen: 256})
	if err != nil {
		t.Fatal(err)
	}
	warned := false
	for _, w := range checkLimits(s, stock) {
		warned = warned || strings.Contains(w.msg, "tcp_fastopen")
	}
	if !warned {
		t.Error("tcp_fastopen set explicitly without the kernel's server bit: no warning")
	}
}
