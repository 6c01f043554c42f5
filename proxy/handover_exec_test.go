package proxy

import (
	"context"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/peer"
)

// TestHandoverAcrossExec is the handover as an upgrade does it, at the proxy's
// level: a child process (this test binary; proxytest.HandoverChild, from TestMain)
// runs a Server; on SIGUSR1 it freezes, writes the snapshot into a memfd, and execs
// itself (same PID) into a process that restores it and serves. Consumers (here) call
// all along with unique bodies: every call gets exactly its own answer, no consumer
// connection closes, and the provider (here) sees no new connection: its connections
// moved too.
func TestHandoverAcrossExec(t *testing.T) {
	prov, err := peer.NewProvider(peer.ProviderConfig{Addr: "127.0.0.1:0"}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go prov.Serve(ctx)
	defer prov.Close()

	child := testkit.StartHandoverChild(t, prov.Addr())
	next := child.Next
	addr := next("listening ")

	const consumers = 50
	clients := make([]*peer.Client, consumers)
	for i := range clients {
		c, err := peer.Dial(ctx, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	waitFor(t, 10*time.Second, "provider connections", func() bool { return prov.Stats().ConnsOpen == 2 })
	load := startCalls(t, ctx, clients, 700)
	waitFor(t, 10*time.Second, "calls before the handover", func() bool { return load.calls.Load() >= 2*consumers })
	before := load.calls.Load()
	if err := child.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	took := next("restored ")
	waitFor(t, 10*time.Second, "calls after the handover", func() bool { return load.calls.Load() > before+5*consumers })
	load.finish(t, clients)
	if n := prov.Stats().ConnsAccepted; n != 2 {
		t.Errorf("the provider accepted %d connections; its 2 should have moved", n)
	}
	t.Logf("%d calls; handover %s; longest call %v", load.calls.Load(), took, time.Duration(load.longest.Load()))
}
