package proxy

import (
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// gateCore is a zap core that holds whoever writes an access-log line until open is called: a test
// holds the goroutine answering a call (callAnswered offers the line before the answer is written)
// without a hook in the code.
type gateCore struct {
	zapcore.LevelEnabler
	entered chan struct{} // closed at the first line
	gate    chan struct{}
	once    sync.Once
}

func newGateCore() *gateCore {
	return &gateCore{LevelEnabler: zapcore.DebugLevel, entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gateCore) With([]zapcore.Field) zapcore.Core { return g }
func (g *gateCore) Sync() error                       { return nil }
func (g *gateCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, g)
}
func (g *gateCore) Write(zapcore.Entry, []zapcore.Field) error {
	g.once.Do(func() { close(g.entered) })
	<-g.gate
	return nil
}
func (g *gateCore) open() { close(g.gate) }

// TestDrainWaitsForTheLastAnswerWritten: a drain ends only once the last answer has been handed to its
// consumer's connection. Found in TestSidecarSIGTERMDrainsUnderLoad (run 81): the answer was counted off
// the in-flight total before it was written, so a drain that saw 0 in flight closed the connection in
// between, and the consumer read EOF for a call its provider had run.
func TestDrainWaitsForTheLastAnswerWritten(t *testing.T) {
	gate := newGateCore()
	f := newFixtureWith(t, peer.ProviderConfig{}, Options{AccessLogger: zap.New(gate)}, func(c *Config) {
		c.UpstreamConns = 1
		c.AccessLog = AccessLogConfig{Enabled: true, SampleRate: 1, MaxPerSecond: 1000}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := callAsync(ctx, f.dial(ctx), 7, "the last answer")
	select {
	case <-gate.entered: // the provider answered; its goroutine is inside callAnswered, before the write
	case <-ctx.Done():
		t.Fatal("the answer never reached the access log")
	}
	// Open the gate once the drain either waits for the call (fixed) or is over (the bug): either way
	// the drain has decided.
	drained := drainUntil(t, ctx, f.srv, "the drain waiting for the call, or over", func() bool {
		return f.srv.Draining() && f.srv.InFlight() == 1
	})
	gate.open()
	r := <-res
	if r.err != nil || r.resp.Value != "the last answer" {
		t.Fatalf("the call answered while the drain ran: got %+v, %v; want its answer", r.resp, r.err)
	}
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}
}

// TestDrainFlushesQueuedAnswers: the drain's close is a lingering one. An answer the provider gave before
// the drain ended, still queued in Stormgate because its consumer reads slowly, reaches the consumer whole;
// the drain ends when the consumer closes its side.
func TestDrainFlushesQueuedAnswers(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) {
		c.UpstreamConns, c.MaxQueuedBytesPerConn = 1, 16<<20
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := net.Dial("tcp", f.ln.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.(*net.TCPConn).SetReadBuffer(64 << 10)
	const size = 6 << 20 // more than the kernel holds (4 MiB of send buffer at most, here)
	if _, err := nc.Write(dubbo.AppendRequest(nil, 9, true, svc, "big", strconv.Itoa(size))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the answer queued in Stormgate", func() bool {
		queued := 0
		f.srv.sessions.each(func(s *session) { queued += s.w.Queued() })
		return f.srv.InFlight() == 0 && queued > 0
	})
	drained := drainUntil(t, ctx, f.srv, "the drain closing connections", func() bool {
		lingering := false
		f.srv.sessions.each(func(s *session) { lingering = lingering || s.linger.Load() != nil })
		return lingering
	})
	frame, err := readDubboFrame(nc)
	if err != nil {
		t.Fatalf("reading the queued answer after the drain closed connections: %v", err)
	}
	h, _ := dubbo.ParseHeader(frame, 0)
	v, err := dubbo.ParseValueResponse(frame[dubbo.HeaderLen:])
	if h.ID != 9 || err != nil || len(v) != size || strings.Trim(v, "x") != "" {
		t.Fatalf("answer: id %d, %d bytes, %v; want id 9, %d bytes of x", h.ID, len(v), err, size)
	}
	for { // then the drain's READONLY event, and its FIN
		frame, err := readDubboFrame(nc)
		if err == io.EOF {
			break
		}
		if h, _ := dubbo.ParseHeader(frame, 0); err != nil || h.Flags&dubbo.FlagEvent == 0 {
			t.Fatalf("after the answer: %x, %v; want events, then EOF (the drain's FIN)", frame, err)
		}
	}
	nc.Close()
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the drain did not end once the consumer closed")
	}
}

// drainUntil starts srv's Drain and waits until cond holds or the drain is over, whichever comes first;
// the channel gives the drain's result.
func drainUntil(t *testing.T, ctx context.Context, srv *Server, what string, cond func() bool) <-chan error {
	t.Helper()
	drained := make(chan error, 1)
	go func() { drained <- srv.Drain(ctx) }()
	waitFor(t, 10*time.Second, what, func() bool {
		if cond() {
			return true
		}
		select {
		case err := <-drained:
			drained <- err
			return true
		default:
			return false
		}
	})
	return drained
}

// readDubboFrame reads one whole Dubbo frame from c.
func readDubboFrame(c net.Conn) ([]byte, error) {
	frame := make([]byte, dubbo.HeaderLen)
	if _, err := io.ReadFull(c, frame); err != nil {
		return nil, err
	}
	h, err := dubbo.ParseHeader(frame, 16<<20)
	if err != nil {
		return nil, err
	}
	frame = append(frame, make([]byte, h.BodyLen)...)
	_, err = io.ReadFull(c, frame[dubbo.HeaderLen:])
	return frame, err
}
