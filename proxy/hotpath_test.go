package proxy

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// hotPath builds a server, a pool with one upstream connection and a session,
// both writing to /dev/null, so the benchmarks measure Stormgate's own work on
// each path plus one write(2) each way.
type hotPath struct {
	srv  *Server
	pool *pool
	uc   *upConn
	sess *session
}

func newHotPath(tb testing.TB) *hotPath {
	tb.Helper()
	srv, err := New(testConfig("127.0.0.1:1"), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	fd, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	p := &pool{srv: srv}
	p.hold.init(p)
	p.sweep.Init(p.onSweep)
	uc := newUpConn(p, nil, fd, 0)
	uc.state.Store(stateReady)
	sl := &poolSlot{}
	sl.uc.Store(uc)
	p.slots.Store(&[]*poolSlot{sl})
	sess := newSession(srv, p, nil, fd, netip.AddrPort{})
	return &hotPath{srv: srv, pool: p, uc: uc, sess: sess}
}

func (h *hotPath) heartbeat(frame []byte, f Frame, cfg *Config) {
	h.sess.handle(f, frame, cfg, h.srv.now())
}

func (h *hotPath) forwardAndRoute(req []byte, f Frame, resp []byte, cfg *Config) {
	h.sess.handle(f, req, cfg, h.srv.now()) // forward: new id, pending entry, written
	id := h.uc.nextID
	h.srv.codec.SetID(resp, id)
	rf, _ := h.srv.codec.ParseHeader(resp, cfg.MaxFrameBytes)
	h.uc.route(rf, resp, h.srv.now()) // response: pending lookup, id restored, written
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	h := newHotPath(t)
	cfg := h.srv.cfg.Load()
	hb := dubbo.AppendHeartbeatRequest(nil, 5)
	hf, _ := h.srv.codec.ParseHeader(hb, cfg.MaxFrameBytes)
	req := dubbo.AppendRequest(nil, 9, true, svc, "echo", "hello")
	rqf, _ := h.srv.codec.ParseHeader(req, cfg.MaxFrameBytes)
	resp := dubbo.AppendValueResponse(nil, 0, dubbo.SerialHessian2, "hello")
	// Warm up maps and buffers.
	for range 100 {
		h.forwardAndRoute(req, rqf, resp, cfg)
	}
	if n := testing.AllocsPerRun(1000, func() { h.heartbeat(hb, hf, cfg) }); n != 0 {
		t.Errorf("heartbeat reply: %v allocs/op", n)
	}
	if n := testing.AllocsPerRun(1000, func() { h.forwardAndRoute(req, rqf, resp, cfg) }); n != 0 {
		t.Errorf("request forward + response routing: %v allocs/op", n)
	}
	if r, hb := h.uc.counts.responses.Load(), h.sess.counts.heartbeats.Load(); r < 1000 || hb < 1000 {
		t.Fatalf("paths did not run: %d responses, %d heartbeats", r, hb)
	}
}

func BenchmarkHeartbeatReply(b *testing.B) {
	h := newHotPath(b)
	cfg := h.srv.cfg.Load()
	hb := dubbo.AppendHeartbeatRequest(nil, 5)
	hf, _ := h.srv.codec.ParseHeader(hb, cfg.MaxFrameBytes)
	b.ReportAllocs()
	for b.Loop() {
		h.heartbeat(hb, hf, cfg)
	}
}

func BenchmarkRequestForward(b *testing.B) {
	h := newHotPath(b)
	cfg := h.srv.cfg.Load()
	req := dubbo.AppendRequest(nil, 9, true, svc, "echo", "hello")
	rqf, _ := h.srv.codec.ParseHeader(req, cfg.MaxFrameBytes)
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		h.sess.handle(rqf, req, cfg, h.srv.now())
		if n++; n == 256 { // clear the pending table now and then
			h.uc.mu.Lock()
			clear(h.uc.pending.m)
			h.uc.mu.Unlock()
			h.uc.npending.Store(0)
			h.sess.inflight.Store(0)
			n = 0
		}
	}
}

func BenchmarkResponseRouting(b *testing.B) {
	h := newHotPath(b)
	cfg := h.srv.cfg.Load()
	resp := dubbo.AppendValueResponse(nil, 0, dubbo.SerialHessian2, "hello")
	b.ReportAllocs()
	now := time.Now().UnixNano()
	for i := 0; b.Loop(); i++ {
		id := int64(i + 1)
		r := request{sess: h.sess, id: 9, serial: 2, arrived: now}
		h.srv.accept(r)
		h.uc.mu.Lock()
		h.uc.pending.add(id, pending{request: r})
		h.uc.mu.Unlock()
		h.uc.npending.Add(1)
		h.srv.codec.SetID(resp, id)
		rf, _ := h.srv.codec.ParseHeader(resp, cfg.MaxFrameBytes)
		h.uc.route(rf, resp, now)
	}
}
