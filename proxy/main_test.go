package proxy

import (
	"os"
	"testing"

	"go.uber.org/zap"
)

// TestMain runs the package's tests with netpoll configured as the sidecar configures
// it (handlers on the pollers), so the tests exercise what runs in production.
func TestMain(m *testing.M) {
	if err := ConfigureNetpoll(zap.NewNop(), DefaultNetpollBuffer, 0); err != nil {
		panic(err)
	}
	handoverChild() // TestHandoverAcrossExec's child process: never returns
	os.Exit(m.Run())
}
