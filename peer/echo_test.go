package peer

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

func startEcho(t testing.TB, cfg EchoConfig) *EchoProvider {
	t.Helper()
	p, err := StartEcho(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dialRaw(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// rawRequest builds a request frame with a raw body.
func rawRequest(flags byte, id int64, body []byte) []byte {
	f := dubbo.AppendHeader(nil, dubbo.Header{Flags: flags, ID: id, BodyLen: int32(len(body))})
	return append(f, body...)
}

const twoWay = dubbo.FlagRequest | dubbo.FlagTwoWay | dubbo.SerialHessian2

func readFrame(t testing.TB, r io.Reader) (dubbo.Header, []byte) {
	t.Helper()
	var hdr [dubbo.HeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		t.Fatalf("reading header: %v", err)
	}
	h, err := dubbo.ParseHeader(hdr[:], 0)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, h.BodyLen)
	if _, err := io.ReadFull(r, body); err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return h, body
}

// The echo reply is the request's body byte for byte under a status-20 header with the
// request's id and serialization id; heartbeats get the Java reply. Pinned in hex.
func TestEchoRepliesBytes(t *testing.T) {
	p := startEcho(t, EchoConfig{})
	c := dialRaw(t, p.Addr())
	body := AppendBody(nil, 42, 20)
	if _, err := c.Write(rawRequest(twoWay, 0x0102, body)); err != nil {
		t.Fatal(err)
	}
	var got [dubbo.HeaderLen + 20]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		t.Fatal(err)
	}
	if want := "dabb0214" + "0000000000000102" + "00000014" + hex.EncodeToString(body); hex.EncodeToString(got[:]) != want {
		t.Fatalf("echo reply\n got %x\nwant %s", got, want)
	}
	if _, err := c.Write(dubbo.AppendHeartbeatRequest(nil, 0x0103)); err != nil {
		t.Fatal(err)
	}
	var hb [17]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		t.Fatal(err)
	}
	if got, want := hex.EncodeToString(hb[:]), "dabb22140000000000000103000000014e"; got != want {
		t.Fatalf("heartbeat reply %s, want %s", got, want)
	}
	st := p.Stats()
	if st.Requests != 1 || st.Heartbeats != 1 || st.Violations != 0 || st.UniqueKeys != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Reading badly (tiny receive buffer, 1..7-byte reads, frequent pauses) changes how
// the bytes arrive, never which bytes are echoed; one-way bodies reach OnOneWay intact.
func TestEchoReadsBadlyButEchoesExactly(t *testing.T) {
	var mu sync.Mutex
	var oneWay [][]byte
	p := startEcho(t, EchoConfig{
		Seed: 7, RecvBuf: 2048,
		Reading: Reading{MaxRead: 7, PauseChance: 0.01, MaxPause: time.Millisecond},
		OnOneWay: func(b []byte) {
			mu.Lock()
			oneWay = append(oneWay, bytes.Clone(b))
			mu.Unlock()
		},
	})
	c := dialRaw(t, p.Addr())
	sizes := []int{1, 15, 16, 100, 3000, 70000}
	var stream []byte
	for i, n := range sizes {
		stream = append(stream, rawRequest(twoWay, int64(i+1), AppendBody(nil, uint64(100+i), n))...)
		stream = append(stream, rawRequest(dubbo.FlagRequest|dubbo.SerialHessian2, int64(1000+i), AppendBody(nil, uint64(200+i), n))...)
	}
	go func() { _, _ = c.Write(stream) }() // the provider answers while we still write
	for i, n := range sizes {
		h, body := readFrame(t, c)
		if h.ID != int64(i+1) || h.Status != dubbo.StatusOK || h.Flags != dubbo.SerialHessian2 {
			t.Fatalf("reply %d: header %+v", i, h)
		}
		if !BodyEqual(body, uint64(100+i), n) {
			t.Fatalf("reply %d: body differs from the request's", i)
		}
	}
	eventually(t, "one-way bodies", func() bool { mu.Lock(); defer mu.Unlock(); return len(oneWay) == len(sizes) })
	for i, b := range oneWay {
		if !BodyEqual(b, uint64(200+i), sizes[i]) {
			t.Fatalf("one-way %d arrived altered", i)
		}
	}
	st := p.Stats()
	if st.Violations != 0 || st.Pauses == 0 || st.Reads < uint64(len(stream)/7) {
		t.Fatalf("stats %+v (want no violations, some pauses, reads of at most 7 bytes)", st)
	}
}

func TestEchoRecordsViolations(t *testing.T) {
	cases := []struct {
		name, kind string
		send       func() []byte
		closes     bool
	}{
		{"bad magic", "malformed frame", func() []byte { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n") }, true},
		{"oversize length", "malformed frame", func() []byte {
			return dubbo.AppendHeader(nil, dubbo.Header{Flags: twoWay, ID: 1, BodyLen: 1 << 30})
		}, true},
		{"negative length", "malformed frame", func() []byte {
			return dubbo.AppendHeader(nil, dubbo.Header{Flags: twoWay, ID: 1, BodyLen: -1})
		}, true},
		{"repeated id", "repeated id", func() []byte {
			return append(rawRequest(twoWay, 5, AppendBody(nil, 1, 30)), rawRequest(twoWay, 5, AppendBody(nil, 2, 30))...)
		}, false},
		{"repeated id, heartbeat after request", "repeated id", func() []byte {
			return append(rawRequest(twoWay, 5, AppendBody(nil, 1, 30)), dubbo.AppendHeartbeatRequest(nil, 5)...)
		}, false},
		{"spliced body", "corrupt body", func() []byte {
			a, b := AppendBody(nil, 1, 100), AppendBody(nil, 2, 100)
			return rawRequest(twoWay, 1, append(a[:50:50], b[50:]...))
		}, false},
		{"duplicate key", "duplicate key", func() []byte {
			return append(rawRequest(twoWay, 1, AppendBody(nil, 9, 30)), rawRequest(dubbo.FlagRequest|2, 2, AppendBody(nil, 9, 30))...)
		}, false},
		{"response frame", "unexpected frame", func() []byte {
			return dubbo.AppendHeartbeatReply(nil, 3, 2)
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := startEcho(t, EchoConfig{})
			c := dialRaw(t, p.Addr())
			if _, err := c.Write(tc.send()); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a violation", func() bool { return p.Stats().Violations > 0 })
			v := p.Violations()
			if len(v) != 1 || v[0].Kind != tc.kind || v[0].Conn != 1 {
				t.Fatalf("violations %v, want one %q", v, tc.kind)
			}
			if tc.closes {
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("connection not closed after a malformed frame: %v", err)
				}
			}
		})
	}
}

// Kill resets every connection and refuses new ones; Restart serves on the same port;
// keys seen before the kill still count as delivered.
func TestEchoKillRestart(t *testing.T) {
	p := startEcho(t, EchoConfig{})
	addr := p.Addr()
	c := dialRaw(t, addr)
	if _, err := c.Write(rawRequest(twoWay, 1, AppendBody(nil, 77, 40))); err != nil {
		t.Fatal(err)
	}
	readFrame(t, c)
	// A request the provider has read but not answered yet is lost with the connection.
	p.Stall(time.Hour)
	if _, err := c.Write(rawRequest(twoWay, 2, AppendBody(nil, 78, 40))); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	p.Stall(0)
	if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("after Kill the connection ended with %v, want a reset", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("connect succeeded while killed")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if p.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", p.Addr(), addr)
	}
	c2 := dialRaw(t, addr)
	// Upstream ids are per connection: 1 again is fine; key 77 again is a second delivery.
	if _, err := c2.Write(rawRequest(twoWay, 1, AppendBody(nil, 77, 40))); err != nil {
		t.Fatal(err)
	}
	readFrame(t, c2)
	v := p.Violations()
	if len(v) != 1 || v[0].Kind != "duplicate key" || !strings.Contains(v[0].Detail, "0x4d") {
		t.Fatalf("violations %v, want the one duplicate key 0x4d", v)
	}
	if st := p.Stats(); st.Kills != 1 || st.Restarts != 1 || st.ConnsAccepted != 2 {
		t.Fatalf("stats %+v", st)
	}
}
