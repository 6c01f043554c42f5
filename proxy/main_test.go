package proxy_test

import (
	"os"
	"testing"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/triple"
)

// TestMain runs the package's tests with netpoll configured as the sidecar configures it (handlers on
// the pollers), so the tests exercise what runs in production. It is in package proxy_test because it
// passes HTTP/2 in for the core's tests that serve it (package proxy/triple imports proxy: the core's
// own test files cannot import it).
func TestMain(m *testing.M) {
	if err := proxy.ConfigureNetpoll(zap.NewNop(), proxy.DefaultNetpollBuffer, 0); err != nil {
		panic(err)
	}
	proxy.SetTestProtocol(triple.New)
	proxy.HandoverChild() // TestHandoverAcrossExec's child process: never returns
	os.Exit(m.Run())
}
