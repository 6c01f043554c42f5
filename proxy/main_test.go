package proxy_test

import (
	"os"
	"testing"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/proxytest"
	"github.com/stormgate/stormgate/proxy/triple"
)

// TestMain runs the package's tests with netpoll configured as the sidecar configures it (handlers on
// the pollers), so the tests exercise what runs in production. It is in package proxy_test because it
// passes in what the core's own test files cannot import (packages proxy/triple and proxy/proxytest
// import proxy): HTTP/2, for the tests that serve it, and the test settings.
func TestMain(m *testing.M) {
	if err := proxy.ConfigureNetpoll(zap.NewNop(), proxy.DefaultNetpollBuffer, 0); err != nil {
		panic(err)
	}
	proxy.SetTestProtocol(triple.New)
	proxy.SetTestConfig(proxytest.Config)
	proxytest.HandoverChild(proxytest.HandoverChildOptions{}) // TestHandoverAcrossExec's child process: never returns
	os.Exit(m.Run())
}
