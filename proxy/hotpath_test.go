package proxy

import (
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/wire"
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
	srv, err := New(testConfig("127.0.0.1:1"), Options{Codec: dubbo.Codec{}})
	if err != nil {
		tb.Fatal(err)
	}
	fd, err := unix.Open(os.DevNull, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	p := &pool{srv: srv}
	p.dubbo.init(p)
	p.ups[protoDubbo] = &p.dubbo
	p.hold.init(p)
	p.sweep.Init(p.onSweep)
	uc := newUpConn(p, nil, fd, 0)
	uc.state.Store(stateReady)
	sl := &poolSlot{}
	sl.uc.Store(uc)
	p.dubbo.slots.Store(&[]*poolSlot{sl})
	sess := newSession(srv, p, nil, fd, netip.AddrPort{})
	return &hotPath{srv: srv, pool: p, uc: uc, sess: sess}
}

func (h *hotPath) heartbeat(frame []byte, f wire.Frame, cfg *Config) {
	h.sess.dubbo.handle(f, frame, cfg, h.srv.now())
}

func (h *hotPath) forwardAndRoute(req []byte, f wire.Frame, resp []byte, cfg *Config) {
	h.sess.dubbo.handle(f, req, cfg, h.srv.now()) // forward: new id, pending entry, written
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
	// The labelled path ran (issue 25): the answers are counted under their method.
	if cfg.MaxMethods == 0 || h.srv.calls.table.label(firstCall) != (callLabels{svc, "echo"}) {
		t.Fatalf("per-method metrics off or echo not interned: %+v", h.srv.calls.table.snapshot())
	}
	if n := h.uc.counts.calls.peek(firstCall).status[0].Load(); n < 1000 {
		t.Fatalf("per-method path did not run: %d echo answers counted", n)
	}
}

// BenchmarkForwardAndRoute is one request forwarded and its answer routed, with
// per-method metrics (labels: the default) and without (metrics.max_methods 0), for
// requests as dubbo-go and Java (a group in the attachments) write them: what issue 25's
// labels cost per request on Stormgate's own path (docs/benchmarks.md has the whole
// process's figure).
func BenchmarkForwardAndRoute(b *testing.B) {
	fx, err := os.ReadFile("dubbo/testdata/requests.txt")
	if err != nil {
		b.Fatal(err)
	}
	frames := map[string][]byte{}
	for line := range strings.Lines(string(fx)) {
		if name, h, ok := strings.Cut(strings.TrimSpace(line), "\t"); ok && line[0] != '#' {
			frames[name], _ = hex.DecodeString(h)
		}
	}
	for _, req := range []string{"dubbogo_echo", "java3_group_version"} {
		for _, mode := range []struct {
			name       string
			maxMethods int
		}{{"labels", 500}, {"nolabels", 0}} {
			b.Run(req+"/"+mode.name, func(b *testing.B) {
				h := newHotPath(b)
				cfg := *h.srv.cfg.Load()
				cfg.MaxMethods = mode.maxMethods
				h.srv.cfg.Store(&cfg)
				frame := append([]byte(nil), frames[req]...)
				rqf, _ := h.srv.codec.ParseHeader(frame, cfg.MaxFrameBytes)
				resp := dubbo.AppendValueResponse(nil, 0, dubbo.SerialHessian2, "hello")
				b.ReportAllocs()
				for b.Loop() {
					h.forwardAndRoute(frame, rqf, resp, &cfg)
				}
			})
		}
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
		h.sess.dubbo.handle(rqf, req, cfg, h.srv.now())
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
		h.uc.pending.Add(id, pending{request: r})
		h.uc.mu.Unlock()
		h.uc.npending.Add(1)
		h.srv.codec.SetID(resp, id)
		rf, _ := h.srv.codec.ParseHeader(resp, cfg.MaxFrameBytes)
		h.uc.route(rf, resp, now)
	}
}
