package triple

import (
	"os"
	"testing"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/proxytest"
)

// TestMain runs the package's tests with netpoll configured as the sidecar configures it (handlers on
// the pollers), so the tests exercise what runs in production, as proxy's do.
func TestMain(m *testing.M) {
	if err := proxy.ConfigureNetpoll(zap.NewNop(), proxy.DefaultNetpollBuffer, 0); err != nil {
		panic(err)
	}
	// TestHandoverAcrossExecTriple's child process (never returns): Triple consumers, whose snapshot
	// crosses in the compact form.
	proxytest.HandoverChild(proxytest.HandoverChildOptions{
		Setup: func(cfg *proxy.Config, opts *proxy.Options) {
			cfg.Protocols = proxy.ProtoTriple
			opts.Protocol = New
		},
		Compact: true,
	})
	os.Exit(m.Run())
}
