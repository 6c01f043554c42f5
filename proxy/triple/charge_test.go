package triple

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/testkit"
	"github.com/stormgate/stormgate/proxy"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestH2PartialFramesCharged: the bytes of a frame a consumer has begun and not finished wait in its
// session (h2Session.in), up to one frame each; they count against limits.max_buffered_bytes as a Dubbo
// frame being reassembled does (proxy/framereader.go), and are given back when the frame completes or the
// connection ends. Before, 16 consumers each trickling most of a 16,000-byte frame held 128 KiB that
// the budget did not see.
func TestH2PartialFramesCharged(t *testing.T) {
	prov := startGRPCProvider(t)
	srv, addr := newH2Server(t, prov.Addr().String(), proxy.ProtoTriple)
	const consumers, length, sent = 16, 16000, 8000
	var conns []net.Conn
	for range consumers {
		nc, _ := h2Handshake(t, addr)
		conns = append(conns, nc)
		// A HEADERS frame for stream 1 announcing length bytes, of which sent arrive.
		hdr := []byte{length >> 16, length >> 8 & 0xff, length & 0xff, 0x1, 0x4, 0, 0, 0, 1}
		if _, err := nc.Write(append(hdr, bytes.Repeat([]byte{0}, sent)...)); err != nil {
			t.Fatal(err)
		}
	}
	want := int64(consumers * (9 + sent))
	waitFor(t, 20*time.Second, "the partial frames charged", func() bool { return envOf(srv).Budget().InUse() >= want })
	for _, nc := range conns {
		nc.Close()
	}
	waitFor(t, 20*time.Second, "their charge given back", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// TestH2ProviderWriteQueueCharged: request bytes the provider's windows allow but its socket does not
// take wait in the provider connection's write queue; past h2WriteFree they count against
// limits.max_buffered_bytes, so a provider that stops reading makes Stormgate refuse what the budget
// cannot hold instead of growing without bound, and they are given back when the connection ends.
// Before, 32 calls of 512 KiB to a provider that opened huge windows and never read sat in the queue,
// uncharged: the budget read 0.
func TestH2ProviderWriteQueueCharged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var provConns []net.Conn
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			provConns = append(provConns, nc)
			mu.Unlock()
			go stuckProvider(nc)
		}
	}()
	srv, addr := newH2Server(t, ln.Addr().String(), proxy.ProtoTriple, func(c *proxy.Config) {
		c.UpstreamConns = 1
		c.MaxBufferedBytes = 64 << 20
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cc := testkit.GRPCClient(t, addr)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			_, err := echo(ctx, cc, bytes.Repeat([]byte{byte('a' + i%26)}, 512<<10))
			if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded && c != codes.Canceled {
				t.Errorf("call %d: %v", i, err)
			}
		})
	}
	waitFor(t, 30*time.Second, "the provider's write queue charged", func() bool { return envOf(srv).Budget().InUse() >= 4<<20 })
	t.Logf("charged with the provider stuck: %d bytes", envOf(srv).Budget().InUse())
	mu.Lock()
	for _, nc := range provConns {
		nc.Close()
	}
	mu.Unlock()
	ln.Close()
	wg.Wait()
	waitFor(t, 20*time.Second, "the charge given back", func() bool { return envOf(srv).Budget().InUse() == 0 })
}

// stuckProvider answers an HTTP/2 client's preface with SETTINGS that open the largest windows, then reads
// nothing more: the kernel's buffers fill and the client's writes stop.
func stuckProvider(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	br := bufio.NewReader(nc)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil {
		return
	}
	fr := http2.NewFramer(nc, br)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	_ = fr.WriteWindowUpdate(0, 1<<31-1-65535)
	for { // until the client's SETTINGS, acked so that the client sees a usable connection
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			_ = fr.WriteSettingsAck()
			return
		}
	}
}
