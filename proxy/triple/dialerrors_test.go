package triple

import (
	"net"
	"testing"
	"time"

	"github.com/stormgate/stormgate/proxy"
)

// TestConnectErrorsCountedByProtocol: a provider that refuses connections is counted in
// stormgate_upstream_connect_errors_total under the protocol of the connection that failed, for both
// protocols (one slot loop counts them, proxy's slot.go).
func TestConnectErrorsCountedByProtocol(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there: every dial is refused
	srv, _ := startH2Server(t, addr, proxy.ProtoDubbo|proxy.ProtoTriple, proxy.Options{})
	waitFor(t, 20*time.Second, "a refused dial of each protocol counted", func() bool {
		const name = "stormgate_upstream_connect_errors_total"
		return metric(t, srv, name, "protocol=dubbo") >= 1 && metric(t, srv, name, "protocol=triple") >= 1
	})
}
