package triple

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2RandomCallsNetPeers: Go's own HTTP/2 server (x/net's, which dubbo-go's Triple provider serves h2c
// with) behind Stormgate, Go's own client in front, random gRPC-shaped calls between them: bodies of 0 to
// 200 KiB written in random pieces at random moments, a handler that reads the whole request and answers
// its digest after a random pause, or answers grpc-status 5 before reading anything, or aborts (RST_STREAM);
// a tenth of the consumers give up on their call at a random moment; Stormgate's stream window is 16 KiB,
// 64 KiB or 1 MiB. Each call must end as its handler made it (the cancelled ones either way), and no
// connection may end: neither the provider connection (a guard of Stormgate's tripping on a real peer,
// as the control-frame credit did) nor a consumer's. Nothing may be left in Stormgate. A failure names
// the seed.
func TestH2RandomCallsNetPeers(t *testing.T) {
	for _, window := range []int{16 << 10, 65535, 1 << 20} {
		t.Run(fmt.Sprintf("window %d", window), func(t *testing.T) { randomCallsNetPeers(t, window) })
	}
}

// netPeerKind is what the provider's handler does with a call, chosen by the consumer in a header.
type netPeerKind int

const (
	netPeerDigest netPeerKind = iota // read the whole request, answer its digest
	netPeerEarly                     // answer grpc-status 5 at once, reading nothing
	netPeerAbort                     // reset the stream (http.ErrAbortHandler)
)

const netPeerKindHeader = "x-kind"

func randomCallsNetPeers(t *testing.T, window int) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var runs atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, _ := strconv.Atoi(r.Header.Get(netPeerKindHeader))
		pause, _ := time.ParseDuration(r.Header.Get("x-pause"))
		switch netPeerKind(kind) {
		case netPeerEarly:
			w.Header().Set("content-type", "application/grpc")
			w.Header().Set("grpc-status", "5")
			w.WriteHeader(http.StatusOK)
			return
		case netPeerAbort:
			panic(http.ErrAbortHandler)
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		runs.Add(1)
		time.Sleep(pause) // a handler's work, not a wait for something
		w.Header().Set("content-type", "application/grpc")
		w.Header().Set("trailer", "grpc-status")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(grpcFrame(digest(body)))
		w.Header().Set("grpc-status", "0")
	})
	prov := startNetProvider(t, handler)
	srv, addr := newH2ServerWith(t, prov.addr(), proxy.ProtoTriple, proxy.Options{}, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.HTTP2.InitialWindowSize = window
	})

	const clients, calls = 4, 24
	rng := rand.New(rand.NewPCG(seed, 3))
	type call struct {
		*netCall
		kind netPeerKind
	}
	all := make([]call, clients*calls)
	for i := range all {
		c := call{netCall: newNetCall(rng, fmt.Sprintf("call-%d", i), rng.IntN(200<<10), i%clients, 10)}
		switch k := rng.IntN(20); {
		case k == 0:
			c.kind = netPeerEarly
		case k == 1:
			c.kind = netPeerAbort
		}
		c.header.Set(netPeerKindHeader, strconv.Itoa(int(c.kind)))
		c.header.Set("x-pause", (time.Duration(rng.IntN(5)) * time.Millisecond).String())
		all[i] = c
	}
	conns := dialNetConsumers(t, addr, clients)
	made := make([]*netCall, len(all))
	for i, c := range all {
		made[i] = c.netCall
	}
	runNetCalls(t, addr, conns, made)
	gaveUp := 0
	for _, c := range all {
		if c.giveUp > 0 {
			gaveUp++
			continue
		}
		switch c.kind {
		case netPeerDigest:
			if !c.answered(grpcFrame(digest(c.body))) {
				t.Errorf("seed %d: %s (%d bytes in %d pieces): %q with %d answer bytes, want its digest", seed, c.tag,
					len(c.body), len(c.pieces), c.status, len(c.answer))
			}
		case netPeerEarly:
			if !strings.HasPrefix(c.status, "5") {
				t.Errorf("seed %d: %s answered before its body was read: %q, want grpc-status 5", seed, c.tag, c.status)
			}
		case netPeerAbort:
			if c.status == "0" {
				t.Errorf("seed %d: %s, reset by its handler, ended grpc-status 0", seed, c.tag)
			}
		}
	}
	t.Logf("%d calls (%d given up on), %d run by the provider, window %d", len(all), gaveUp, runs.Load(), window)
	if n := prov.accepted.Load(); n != 1 {
		t.Errorf("seed %d: the provider accepted %d connections, want 1: Stormgate ended its connection", seed, n)
	}
	for i, cc := range conns {
		if st := cc.State(); st.Closed || st.Closing {
			t.Errorf("seed %d: consumer %d's connection ended: %+v", seed, i, st)
		}
	}
	for g := range h2.NumGuards {
		if n := testutilCounter(h2Of(srv).m.guards[g]); n != 0 {
			t.Errorf("seed %d: guard %v tripped %v times on real peers", seed, g, n)
		}
	}
	waitNothingLeft(t, srv)
}
