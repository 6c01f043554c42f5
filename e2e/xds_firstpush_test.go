package e2e

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Issue 24: with --xds the sidecar opened 4 provider connections (the startup settings) and retired
// 2 when the first push (upstream.connections: 2) arrived. It now waits, bounded by --xds-wait, for
// the first push before dialling: the provider sees exactly the pushed 2, ever. Without a push
// within --xds-wait it dials with the startup settings and stays unready.
func TestXDSDialsWithTheFirstPush(t *testing.T) {
	const node = "e2e-first-push"
	cp := startXDSFakeCP(t)
	cp.push(t, node, &sg.Settings{Upstream: &sg.Upstream{Connections: proto.Int32(2)}})
	prov := startXDSProvider(t)
	sc := startXDSSidecar(t, prov.Addr(), cp.addr, node, 2, "--xds-wait", "10s")
	sc.waitConfigDump(t, 10*time.Second, "the first push", func(cd configDump) bool {
		return cd.Source == "xds" && cd.field("upstream.connections") == "2"
	})
	if st := prov.Stats(); st.ConnsAccepted != 2 || st.ConnsOpen != 2 {
		t.Errorf("provider accepted %d connections (%d open), want the pushed 2 and no more", st.ConnsAccepted, st.ConnsOpen)
	}
	if got := sc.metric(t, "stormgate_upstream_connections"); got != 2 {
		t.Errorf("stormgate_upstream_connections %v, want 2", got)
	}
	if l := sc.jsonLines("dialling the provider with the control plane's settings"); len(l) != 1 {
		t.Errorf("no line saying it waited for the first push: %v", l)
	}

	// No control plane answering: after --xds-wait it dials with the startup settings (4), unready.
	prov2 := startXDSProvider(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent := ln.Addr().String() // nobody listens there once closed
	ln.Close()
	start := time.Now()
	sc2 := startXDSSidecar(t, prov2.Addr(), silent, node+"-2", 4, "--xds-wait", "300ms")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("start took %v", took)
	}
	if l := sc2.jsonLines("no settings from the control plane within --xds-wait; dialling the provider with the startup settings"); len(l) != 1 {
		t.Errorf("no line saying it stopped waiting: %v", l)
	}
	if code := sc2.readyz(context.Background()); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d without settings from the control plane, want 503", code)
	}
}
