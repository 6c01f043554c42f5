package peer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

const svc = "org.example.Echo"

// startProvider starts a provider serving until the test ends, and checks that Serve
// returns ErrProviderClosed.
func startProvider(t testing.TB, cfg ProviderConfig) *Provider {
	t.Helper()
	p, err := NewProvider(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(context.Background()) }()
	t.Cleanup(func() {
		_ = p.Close()
		if err := <-done; !errors.Is(err, ErrProviderClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	return p
}

func dial(t testing.TB, addr string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func idBytes(id int64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(id))
	return fmt.Sprintf("%x", b)
}

func waitClosed(t testing.TB, c *Client) error {
	t.Helper()
	select {
	case <-c.Closed():
		return c.Err()
	case <-time.After(10 * time.Second):
		t.Fatal("connection not closed")
		return nil
	}
}

func TestEcho(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	r, err := c.Call(testCtx(t), 42, svc, "echo", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != 42 || r.Status != dubbo.StatusOK || r.Flags != dubbo.SerialHessian2 || r.Value != "hello" {
		t.Fatalf("response %+v", r)
	}
	if want := unhex(t, "dabb0214"+idBytes(42)+"00000007 91 05 68656c6c6f"); !bytes.Equal(r.Raw, want) {
		t.Fatalf("raw % x, want % x", r.Raw, want)
	}
	if s := p.Stats(); s.Requests != 1 || s.Replies != 1 || s.ConnsAccepted != 1 || s.ConnsOpen != 1 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestMethods(t *testing.T) {
	p := startProvider(t, ProviderConfig{Methods: map[string]time.Duration{"slow": 10 * time.Millisecond, "quick": 0}})
	c := dial(t, p.Addr())
	long := strings.Repeat("é", 70000) // two chunks, and a frame larger than the read buffers
	cases := []struct {
		method, arg string
		status      byte
		value       string // prefix for error messages
		exception   string
	}{
		{"echo", "", 20, "", ""},
		{"echo", "中文 😀", 20, "中文 😀", ""},
		{"echo", long, 20, long, ""},
		{"sleep", "1ms", 20, "1ms", ""},
		{"sleep", "soon", 80, "sleep: bad duration", ""},
		{"fail", "x", 20, "fail: x", "java.lang.RuntimeException"},
		{"error", "x", 80, "error: x", ""},
		{"big", "100000", 20, strings.Repeat("x", 100000), ""},
		{"big", "-1", 80, "big: bad length", ""},
		{"slow", "s", 20, "s", ""},
		{"quick", "q", 20, "q", ""},
		{"nosuch", "x", 60, "Not found exported service: " + svc, ""},
	}
	for i, tc := range cases {
		r, err := c.Call(testCtx(t), int64(i), svc, tc.method, tc.arg)
		if err != nil {
			t.Fatalf("%s(%.10q): %v", tc.method, tc.arg, err)
		}
		if r.ID != int64(i) || r.Status != tc.status || !strings.HasPrefix(r.Value, tc.value) || r.Exception != tc.exception {
			t.Errorf("%s(%.10q): id %d status %d exception %q value %.40q", tc.method, tc.arg, r.ID, r.Status, r.Exception, r.Value)
		}
	}
	if s := c.Stats(); s.Unexpected != 0 || s.Responses != uint64(len(cases)) {
		t.Fatalf("client stats %+v", s)
	}
}

func TestConcurrentCallsOneClient(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	const n = 200
	ctx := testCtx(t)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			method, arg := "echo", fmt.Sprintf("v%d", i)
			if i%4 == 0 {
				method, arg = "sleep", fmt.Sprintf("%dms", i%20)
			}
			r, err := c.Call(ctx, int64(1000+i), svc, method, arg)
			switch {
			case err != nil:
				errs <- err
			case r.ID != int64(1000+i) || r.Value != arg:
				errs <- fmt.Errorf("call %d got id %d value %q", i, r.ID, r.Value)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := c.Stats(); s.Responses != n || s.Unexpected != 0 {
		t.Fatalf("client stats %+v", s)
	}
	// A delayed reply is counted just after it is flushed: poll.
	eventually(t, "provider counts every reply", func() bool {
		s := p.Stats()
		return s.Requests == n && s.Replies == n && s.InFlight == 0
	})
}

func TestDuplicateIDRefused(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() { _, err := c.Call(ctx, 5, svc, "sleep", "10s"); done <- err }()
	eventually(t, "sleep in flight", func() bool { return p.Stats().InFlight == 1 })
	if _, err := c.Call(testCtx(t), 5, svc, "echo", "x"); !errors.Is(err, ErrIDInUse) {
		t.Fatalf("second call with id 5: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled call: %v", err)
	}
}

func TestHeartbeatReply(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	const id = 0x7eadbeef01020304
	r, err := c.Heartbeat(testCtx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if want := unhex(t, "dabb2214"+idBytes(id)+"00000001 4e"); !bytes.Equal(r.Raw, want) {
		t.Fatalf("heartbeat reply % x, want % x", r.Raw, want)
	}
	if s := p.Stats(); s.HeartbeatsReceived != 1 || s.Requests != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestOneWayGetsNoReply(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	if err := c.CallOneWay(1, svc, "echo", "one-way"); err != nil {
		t.Fatal(err)
	}
	// One-way events get nothing either.
	if err := c.Send(dubbo.AppendReadonlyEvent(nil, 2)); err != nil {
		t.Fatal(err)
	}
	// The provider answers in order on a connection, so a reply to either frame would
	// arrive before this one and be counted as unexpected.
	r, err := c.Call(testCtx(t), 3, svc, "echo", "two-way")
	if err != nil || r.Value != "two-way" {
		t.Fatalf("%+v %v", r, err)
	}
	if s := c.Stats(); s.Unexpected != 0 || s.Responses != 1 {
		t.Fatalf("client stats %+v", s)
	}
	if s := p.Stats(); s.OneWay != 1 || s.EventsReceived != 1 || s.Requests != 1 || s.Replies != 1 {
		t.Fatalf("provider stats %+v", s)
	}
}

func TestPipelinedFrames(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	// Register waiters for ids 1..50, then send all 50 frames in one write.
	var batch []byte
	for i := 1; i <= 50; i++ {
		batch = dubbo.AppendRequest(batch, int64(i), true, svc, "echo", fmt.Sprint(i))
	}
	chans := make([]chan Response, 51)
	for i := 1; i <= 50; i++ {
		ch, err := c.register(int64(i))
		if err != nil {
			t.Fatal(err)
		}
		chans[i] = ch
	}
	if err := c.Send(batch); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 50; i++ {
		r, err := c.wait(testCtx(t), int64(i), chans[i])
		if err != nil || r.Value != fmt.Sprint(i) {
			t.Fatalf("id %d: %+v %v", i, r, err)
		}
	}
}

func TestProviderHeartbeatsAnsweredByClient(t *testing.T) {
	p := startProvider(t, ProviderConfig{HeartbeatInterval: 5 * time.Millisecond})
	c := dial(t, p.Addr())
	select {
	case f := <-c.Events():
		want := unhex(t, "dabbe200"+idBytes(f.Header.ID)+"00000001 4e")
		if !bytes.Equal(f.Raw, want) || f.Kind() != dubbo.KindEventTwoWay || f.Event() != 0 {
			t.Fatalf("heartbeat request % x", f.Raw)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat from the provider")
	}
	eventually(t, "3 heartbeat replies", func() bool { return p.Stats().ResponsesReceived >= 3 })
	if s, cs := p.Stats(), c.Stats(); s.HeartbeatsSent < 3 || cs.HeartbeatsAnswered < 3 {
		t.Fatalf("provider %+v client %+v", s, cs)
	}
}

func TestSendReadonlyWriteable(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	eventually(t, "connection registered", func() bool { return p.Stats().ConnsOpen == 1 })
	if n := p.SendReadonly(); n != 1 {
		t.Fatalf("SendReadonly reached %d conns", n)
	}
	if n := p.SendWriteable(); n != 1 {
		t.Fatalf("SendWriteable reached %d conns", n)
	}
	for _, want := range []byte{'R', 'W'} {
		f := <-c.Events()
		if f.Event() != want || f.Kind() != dubbo.KindEventOneWay {
			t.Fatalf("event % x, want %c", f.Raw, want)
		}
	}
	// Still serving.
	if r, err := c.Call(testCtx(t), 1, svc, "echo", "x"); err != nil || r.Value != "x" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestShutdownSendsReadonlyAndDrains(t *testing.T) {
	p, err := NewProvider(ProviderConfig{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- p.Serve(context.Background()) }()
	defer p.Close()

	const n = 3
	clients := make([]*Client, n)
	results := make(chan error, n)
	for i := range clients {
		clients[i] = dial(t, p.Addr())
		go func(c *Client) {
			r, err := c.Call(testCtx(t), 77, svc, "sleep", "500ms")
			if err == nil && (r.Status != dubbo.StatusOK || r.Value != "500ms") {
				err = fmt.Errorf("sleep reply %+v", r)
			}
			if err == nil {
				// READONLY was written before the reply, so it has been reported already.
				select {
				case f := <-c.Events():
					if want := unhex(t, "dabba200"+idBytes(f.Header.ID)+"00000002 0152"); !bytes.Equal(f.Raw, want) {
						err = fmt.Errorf("event % x, want % x", f.Raw, want)
					}
				default:
					err = errors.New("sleep reply arrived before READONLY")
				}
			}
			results <- err
		}(clients[i])
	}
	eventually(t, "3 sleeps in flight", func() bool { return p.Stats().InFlight == n })

	start := time.Now()
	if err := p.Shutdown(testCtx(t)); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	t.Logf("Shutdown took %v", time.Since(start))
	for range n {
		if err := <-results; err != nil {
			t.Error(err)
		}
	}
	for _, c := range clients {
		if err := waitClosed(t, c); !errors.Is(err, io.EOF) {
			t.Errorf("client ended with %v, want EOF", err)
		}
	}
	if err := <-served; !errors.Is(err, ErrProviderClosed) {
		t.Fatalf("Serve: %v", err)
	}
	s := p.Stats()
	if s.EventsSent != n || s.Replies != n || s.ConnsOpen != 0 {
		t.Fatalf("stats %+v", s)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("still accepting after Shutdown")
	}
}

func TestShutdownSilent(t *testing.T) {
	p := startProvider(t, ProviderConfig{SilentShutdown: true})
	c := dial(t, p.Addr())
	if _, err := c.Call(testCtx(t), 1, svc, "echo", "x"); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if err := waitClosed(t, c); !errors.Is(err, io.EOF) {
		t.Fatalf("client ended with %v", err)
	}
	if s := c.Stats(); s.Events != 0 || p.Stats().EventsSent != 0 {
		t.Fatalf("events sent on a silent shutdown: %+v", s)
	}
}

func TestCloseIsImmediate(t *testing.T) {
	p, err := NewProvider(ProviderConfig{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx) }()
	c := dial(t, p.Addr())
	call := make(chan error, 1)
	go func() { _, err := c.Call(testCtx(t), 1, svc, "sleep", "1m"); call <- err }()
	eventually(t, "sleep in flight", func() bool { return p.Stats().InFlight == 1 })
	start := time.Now()
	cancel() // ending Serve's context closes the provider
	if err := <-served; !errors.Is(err, ErrProviderClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if err := <-call; err == nil {
		t.Fatal("call in flight succeeded after Close")
	}
	waitClosed(t, c)
	if err := p.Close(); err != nil { // waits for every goroutine, including the sleeping one
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %v with a 1m sleep in flight", d)
	}
	if s := p.Stats(); s.ConnsOpen != 0 || s.InFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDelayDoesNotBlockReader(t *testing.T) {
	p := startProvider(t, ProviderConfig{MaxDelayed: 1})
	c := dial(t, p.Addr())
	ctx, cancel := context.WithCancel(testCtx(t))
	slow := make(chan error, 1)
	go func() { _, err := c.Call(ctx, 1, svc, "sleep", "1m"); slow <- err }()
	eventually(t, "sleep in flight", func() bool { return p.Stats().InFlight == 1 })
	r, err := c.Call(testCtx(t), 2, svc, "echo", "fast")
	if err != nil || r.Value != "fast" {
		t.Fatalf("echo behind a sleep: %+v %v", r, err)
	}
	// The delayed-request cap (1) is taken: the next delayed request is refused at once.
	r, err = c.Call(testCtx(t), 3, svc, "sleep", "1m")
	if err != nil || r.Status != dubbo.StatusThreadpoolExhausted {
		t.Fatalf("over the cap: %+v %v", r, err)
	}
	select {
	case err := <-slow:
		t.Fatalf("sleep returned early: %v", err)
	default:
	}
	cancel()
	<-slow
	if s := p.Stats(); s.Rejected != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestBadFrameClosesOnlyThatConnection(t *testing.T) {
	p := startProvider(t, ProviderConfig{MaxFrame: 1024})
	good := dial(t, p.Addr())
	cases := []struct {
		name string
		in   []byte
	}{
		{"bad magic", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"negative length", unhex(t, "dabbc200 0000000000000001 80000000")},
		{"over max frame", unhex(t, "dabbc200 0000000000000001 00000400")},
	}
	for i, tc := range cases {
		bad := dial(t, p.Addr())
		if err := bad.Send(tc.in); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, bad)
		if got := p.Stats().BadFrames; got != uint64(i+1) {
			t.Fatalf("%s: BadFrames %d", tc.name, got)
		}
		if r, err := good.Call(testCtx(t), int64(i), svc, "echo", "still here"); err != nil || r.Value != "still here" {
			t.Fatalf("%s: other connection: %+v %v", tc.name, r, err)
		}
	}
	eventually(t, "bad connections gone", func() bool { return p.Stats().ConnsOpen == 1 })
}

func TestUndecodableBodyGetsBadRequest(t *testing.T) {
	p := startProvider(t, ProviderConfig{})
	c := dial(t, p.Addr())
	frame := append(unhex(t, "dabbc200 0000000000000009 00000003"), 0xff, 0xff, 0xff)
	r, err := c.Roundtrip(testCtx(t), frame)
	if err != nil || r.ID != 9 || r.Status != dubbo.StatusBadRequest {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := c.Call(testCtx(t), 10, svc, "echo", "ok"); err != nil || r.Value != "ok" {
		t.Fatalf("after a bad body: %+v %v", r, err)
	}
	if s := p.Stats(); s.BadRequests != 1 || s.BadFrames != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestManyConnections(t *testing.T) {
	const conns = 2000
	p := startProvider(t, ProviderConfig{})
	clients := make([]*Client, conns)
	// Generous: the machine is shared, and -race makes 4,000 sockets slow to set up.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	const workers = 100
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < conns; i += workers {
				c, err := Dial(ctx, p.Addr(), 0)
				if err != nil {
					errs <- err
					return
				}
				clients[i] = c
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, "all connections open", func() bool { return p.Stats().ConnsOpen == conns })
	dialed := time.Since(start)

	// Every connection calls at once (all are open at the same time).
	callErrs := make(chan error, conns)
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := fmt.Sprint(i)
			r, err := c.Call(ctx, int64(i), svc, "echo", want)
			if err == nil && r.Value != want {
				err = fmt.Errorf("conn %d: value %q", i, r.Value)
			}
			if err != nil {
				callErrs <- err
			}
		}()
	}
	wg.Wait()
	close(callErrs)
	for err := range callErrs {
		t.Fatal(err)
	}
	t.Logf("%d connections dialed in %v, all calls done in %v", conns, dialed, time.Since(start))
	if s := p.Stats(); s.Requests != conns || s.ConnsAccepted != conns {
		t.Fatalf("stats %+v", s)
	}
}

// fakeServer accepts one connection and runs fn on it.
func fakeServer(t *testing.T, fn func(net.Conn)) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		fn(nc)
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

func TestClientCountsUnexpectedResponses(t *testing.T) {
	addr := fakeServer(t, func(nc net.Conn) {
		hdr := make([]byte, dubbo.HeaderLen)
		if _, err := io.ReadFull(nc, hdr); err != nil {
			return
		}
		h, _ := dubbo.ParseHeader(hdr, 0)
		if _, err := io.CopyN(io.Discard, nc, int64(h.BodyLen)); err != nil {
			return
		}
		var out []byte
		out = dubbo.AppendValueResponse(out, h.ID, 2, "first")
		out = dubbo.AppendValueResponse(out, h.ID, 2, "duplicate")
		out = dubbo.AppendValueResponse(out, 12345, 2, "unknown id")
		_, _ = nc.Write(out)
		_, _ = io.Copy(io.Discard, nc) // until the client closes
	})
	c := dial(t, addr)
	r, err := c.Call(testCtx(t), 7, svc, "echo", "x")
	if err != nil || r.Value != "first" {
		t.Fatalf("%+v %v", r, err)
	}
	eventually(t, "2 unexpected responses", func() bool { return c.Stats().Unexpected == 2 })
}

func TestClientErrTellsResetFromEOF(t *testing.T) {
	addr := fakeServer(t, func(nc net.Conn) {
		// Wait for a byte so the RST cannot race the client's connect.
		_, _ = nc.Read(make([]byte, 1))
		_ = nc.(*net.TCPConn).SetLinger(0) // close sends RST
	})
	c := dial(t, addr)
	if err := c.Send([]byte{0}); err != nil {
		t.Fatal(err)
	}
	if err := waitClosed(t, c); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reset reported as %v", err)
	}
	addr = fakeServer(t, func(nc net.Conn) {})
	c = dial(t, addr)
	if err := waitClosed(t, c); !errors.Is(err, io.EOF) {
		t.Fatalf("FIN reported as %v", err)
	}
	if _, err := c.Call(testCtx(t), 1, svc, "echo", "x"); err == nil {
		t.Fatal("call on a closed client succeeded")
	}
	c = dial(t, fakeServer(t, func(nc net.Conn) { _, _ = io.Copy(io.Discard, nc) }))
	c.Close()
	if err := c.Err(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("local close reported as %v", err)
	}
}

func BenchmarkEchoParallel(b *testing.B) {
	p := startProvider(b, ProviderConfig{})
	c := dial(b, p.Addr())
	ctx := context.Background()
	var next sync.Mutex
	id := int64(0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			next.Lock()
			id++
			my := id
			next.Unlock()
			if _, err := c.Call(ctx, my, svc, "echo", "hello"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkEchoPipelined keeps 64 calls in flight on one connection: the provider's
// throughput with batched reads and flushes.
func BenchmarkEchoPipelined(b *testing.B) {
	p := startProvider(b, ProviderConfig{})
	c := dial(b, p.Addr())
	ctx := context.Background()
	var id atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Call(ctx, id.Add(1), svc, "echo", "hello"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
