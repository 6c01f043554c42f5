package h2

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Real peers: grpc-go v1.84 (its own HTTP/2 transport and HPACK encoder, which must honour
// SETTINGS_HEADER_TABLE_SIZE = 0) against the Conn state machine over loopback TCP, both roles.

// rawCodec sends []byte messages as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "raw" }

// miniServer answers gRPC unary calls on one connection with a Conn: echo the request message, or the
// status named by the x-status header. One goroutine reads and writes.
func miniServer(t *testing.T, nc net.Conn, done chan<- Counters) {
	c := NewConn(Config{InitialWindowSize: 32 << 10})
	type call struct {
		req     []byte
		status  string
		pending []byte // response DATA not yet sent (flow control)
		sentHdr bool
	}
	calls := map[uint32]*call{}
	var in, out []byte
	rd := make([]byte, 64<<10)
	flush := func() error {
		out = append(out, c.Output()...)
		c.ClearOutput()
		if len(out) == 0 {
			return nil
		}
		_, err := nc.Write(out)
		out = out[:0]
		return err
	}
	send := func(id uint32, cl *call) {
		var n int
		out, n, _ = c.AppendData(time.Now().UnixNano(), out, id, cl.pending, false)
		cl.pending = cl.pending[n:]
		if len(cl.pending) == 0 {
			out, _ = c.AppendHeaders(out, id, []HeaderField{{Name: "grpc-status", Value: "0"}}, true)
			delete(calls, id)
		}
	}
	defer func() { done <- *c.Counters() }()
	if flush() != nil {
		return
	}
	for {
		k, err := nc.Read(rd)
		if err != nil {
			return
		}
		in = append(in, rd[:k]...)
		for {
			n, ev, err := c.Read(time.Now().UnixNano(), in)
			if err != nil {
				t.Errorf("server Conn: %v", err)
				_ = flush()
				return
			}
			if n == 0 {
				break
			}
			switch ev.Kind {
			case EventHeaders:
				if !ev.Trailers {
					st, _ := Field(ev.Fields, "x-status")
					calls[ev.Stream] = &call{status: st}
				}
			case EventData:
				if cl := calls[ev.Stream]; cl != nil {
					cl.req = append(cl.req, ev.Data...)
				}
				_ = c.Consumed(ev.Stream, len(ev.Data))
			case EventReset:
				delete(calls, ev.Stream)
			case EventWindow:
				for id, cl := range calls {
					if cl.sentHdr {
						send(id, cl)
					}
				}
			}
			if cl := calls[ev.Stream]; cl != nil && ev.EndStream && !cl.sentHdr {
				cl.sentHdr = true
				if cl.status != "" {
					out, _ = c.AppendHeaders(out, ev.Stream, append(ErrorTrailers(false, 0, "as asked")[:2],
						HeaderField{Name: "grpc-status", Value: cl.status},
						HeaderField{Name: "grpc-message", Value: "as asked"}), true)
					delete(calls, ev.Stream)
				} else {
					out, _ = c.AppendHeaders(out, ev.Stream, []HeaderField{{Name: ":status", Value: "200"},
						{Name: "content-type", Value: "application/grpc"}}, false)
					cl.pending = cl.req
					send(ev.Stream, cl)
				}
			}
			in = in[n:]
		}
		if flush() != nil {
			return
		}
	}
}

func TestRealGRPCClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan Counters, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		miniServer(t, nc, done)
	}()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(msg []byte, md ...string) ([]byte, error) {
		var resp []byte
		c := ctx
		if len(md) > 0 {
			c = metadata.AppendToOutgoingContext(ctx, md...)
		}
		err := cc.Invoke(c, "/stormgate.Test/Echo", &msg, &resp)
		return resp, err
	}
	// Many calls, so grpc-go's encoder goes through the table size change; sizes across flow-control windows.
	for i, size := range []int{0, 1, 100, 16 << 10, 40 << 10, 200 << 10, 7, 1 << 20} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, size)
		for j := 0; j < 3; j++ {
			resp, err := call(msg, "x-req", fmt.Sprint(i, j))
			if err != nil || !bytes.Equal(resp, msg) {
				t.Fatalf("size %d: %d bytes back, %v", size, len(resp), err)
			}
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := []byte(fmt.Sprintf("concurrent-%d", i))
			if resp, err := call(msg); err != nil || !bytes.Equal(resp, msg) {
				t.Errorf("concurrent %d: %q %v", i, resp, err)
			}
		}()
	}
	wg.Wait()
	if _, err := call([]byte("x"), "x-status", "14"); status.Code(err) != codes.Unavailable {
		t.Fatalf("error status: %v", err)
	}
	cc.Close()
	select {
	case ctr := <-done:
		if ctr.GoAwaySent {
			t.Fatalf("server sent GOAWAY %v", ctr.GoAwayCode)
		}
		for g, n := range ctr.Guards {
			if n != 0 {
				t.Errorf("guard %v tripped %d times by an honest grpc-go client", Guard(g), n)
			}
		}
		t.Logf("server: %d frames, %d PINGs answered, %d streams", ctr.Frames, ctr.PingsAnswered, ctr.StreamsOpened)
	case <-time.After(10 * time.Second):
		t.Fatal("server did not end")
	}
}

// TestRealGRPCServer: the Conn as a client (Stormgate toward a provider) against grpc-go's server.
func TestRealGRPCServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}), grpc.UnknownServiceHandler(func(_ any, ss grpc.ServerStream) error {
		var msg []byte
		if err := ss.RecvMsg(&msg); err != nil {
			return err
		}
		if bytes.HasPrefix(msg, []byte("fail")) {
			return status.Error(codes.FailedPrecondition, "failed: "+string(msg))
		}
		return ss.SendMsg(&msg)
	}))
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	c := NewConn(Config{Role: RoleClient, InitialWindowSize: 16 << 10})
	var in []byte
	rd := make([]byte, 64<<10)
	write := func(b []byte) {
		t.Helper()
		b = append(append([]byte(nil), c.Output()...), b...) // Output goes first
		c.ClearOutput()
		if _, err := nc.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	// unary sends one call and collects its answer: message bytes and grpc-status.
	unary := func(msg []byte) ([]byte, int, string) {
		t.Helper()
		id, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.AppendHeaders(nil, id, request("/stormgate.Test/Echo"), false)
		if err != nil {
			t.Fatal(err)
		}
		body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
		body = append(body, msg...)
		for {
			var n int
			out, n, err = c.AppendData(1, out, id, body, true)
			if err != nil {
				t.Fatal(err)
			}
			body = body[n:]
			write(out)
			out = nil
			if len(body) == 0 {
				break
			}
			// Wait for window.
			for c.SendWindow(id) == 0 {
				k, err := nc.Read(rd)
				if err != nil {
					t.Fatal(err)
				}
				in = append(in, rd[:k]...)
				for {
					n, _, err := c.Read(1, in)
					if err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						break
					}
					in = in[n:]
				}
				write(nil)
			}
		}
		var resp []byte
		for {
			n, ev, err := c.Read(1, in)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				write(nil)
				k, err := nc.Read(rd)
				if err != nil {
					t.Fatal(err)
				}
				in = append(in, rd[:k]...)
				continue
			}
			in = in[n:]
			if ev.Stream != id {
				continue
			}
			switch ev.Kind {
			case EventData:
				resp = append(resp, ev.Data...)
				_ = c.Consumed(id, len(ev.Data))
			case EventReset:
				t.Fatalf("stream reset %v", ev.Code)
			case EventHeaders:
				if ev.EndStream {
					code, m, ok := GRPCStatus(ev.Fields)
					if !ok {
						t.Fatalf("no grpc-status in %v", ev.Fields)
					}
					if len(resp) >= 5 {
						resp = resp[5:]
					}
					return resp, code, m
				}
			}
		}
	}
	for i, size := range []int{0, 10, 20 << 10, 100 << 10, 5, 300 << 10} {
		msg := bytes.Repeat([]byte{byte('A' + i)}, size)
		for j := 0; j < 3; j++ {
			resp, code, m := unary(msg)
			if code != 0 || !bytes.Equal(resp, msg) {
				t.Fatalf("size %d: status %d %q, %d bytes back", size, code, m, len(resp))
			}
		}
	}
	if _, code, m := unary([]byte("fail-42")); code != int(codes.FailedPrecondition) || m != "failed: fail-42" {
		t.Fatalf("business error: %d %q", code, m)
	}
	if ctr := c.Counters(); ctr.GoAwaySent || ctr.Guards != [NumGuards]uint64{} {
		t.Fatalf("%+v", ctr)
	}
	if err := nc.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatal(err)
	}
}
