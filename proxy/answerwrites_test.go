package proxy

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2AnswerFramesLeaveTogether: the frames of an answer that come in one read from the provider (the
// Triple echo provider writes a unary answer's head, message and trailers with one write(2)) go to the
// consumer in one write(2), not one each: a unary call cost three system calls on the consumer's side
// where one does (make bench, triple-forward: 3,913 writes of a head alone in one second at 4,000
// calls/s).
func TestH2AnswerFramesLeaveTogether(t *testing.T) {
	prov, err := peer.StartTripleEcho(peer.TripleConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prov.Close() })
	cfg := testConfig(prov.Addr())
	cfg.Protocols, cfg.UpstreamConns = ProtoTriple, 1
	srv, err := New(cfg, Options{Codec: dubbo.Codec{}, Protocol: testProtocol, Logger: zaptest.NewLogger(t).Named("proxy"), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type write struct {
		fd int
		b  []byte
	}
	var writes []write // every write(2), to the consumers and to the provider
	srv.wenv.sys = func(fd int, b []byte) (int, error) {
		n, err := unix.Write(fd, b)
		if n > 0 {
			mu.Lock()
			writes = append(writes, write{fd, bytes.Clone(b[:n])})
			mu.Unlock()
		}
		return n, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	ln := listenRaw(t, srv)
	t.Cleanup(func() { srv.Close(); cancel() })
	waitFor(t, 20*time.Second, "the provider connection", func() bool {
		r, _, _ := srv.poolList()[0].connStates()
		return r == 1
	})

	res, err := loadgen.Run(t.Context(), loadgen.Config{Protocol: loadgen.ProtocolTriple, Target: ln.addr, Conns: 2, Rate: 100,
		BodyMin: 16, BodyMax: 2048, Duration: time.Second, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 100 || res.OK != res.Sent || res.BodyMismatches != 0 {
		t.Fatalf("sent %d ok %d mismatches %d errors %v", res.Sent, res.OK, res.BodyMismatches, res.ErrorByStatus)
	}
	// The provider's connection writes through the same writers: its first write is the client preface.
	mu.Lock()
	defer mu.Unlock()
	upFDs := map[int]bool{}
	for _, wr := range writes {
		if bytes.HasPrefix(wr.b, []byte(h2.ClientPreface)) {
			upFDs[wr.fd] = true
		}
	}
	if len(upFDs) != 1 {
		t.Fatalf("%d provider connections wrote the client preface, want 1", len(upFDs))
	}
	heads, split := 0, 0
	for _, wr := range writes {
		if upFDs[wr.fd] {
			continue
		}
		w := wr.b
		opened, ended := map[uint32]bool{}, map[uint32]bool{}
		for len(w) >= h2.FrameHeaderLen {
			h, ok := h2.ParseFrameHeader(w)
			if !ok || len(w) < h.FrameLen() {
				t.Fatalf("a write ends inside a frame: %x", w)
			}
			if h.Type == h2.FrameHeaders {
				if h.Flags.Has(h2.FlagEndStream) {
					ended[h.StreamID] = true
				} else {
					opened[h.StreamID] = true
				}
			}
			w = w[h.FrameLen():]
		}
		for id := range opened {
			heads++
			if !ended[id] {
				split++
			}
		}
	}
	if heads != 100 || split != 0 {
		t.Errorf("%d answer heads written, %d of them without their trailers in the same write(2); want 100, 0", heads, split)
	}
}
