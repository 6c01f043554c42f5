package peer

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/h2"
)

func TestSniffProtocol(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", sniffUndecided},
		{"\xda", sniffUndecided},
		{"\xda\xbb", sniffDubbo},
		{"\xda\xbb\x02\x14", sniffDubbo},
		{"\xda\xbc", sniffForeign},
		{"P", sniffUndecided},
		{"PRI * HTTP/2.0", sniffUndecided},
		{h2.ClientPreface[:23], sniffUndecided},
		{h2.ClientPreface, sniffTriple},
		{"PRI * HTTP/1.1\r\n", sniffForeign},
		{"GET / HTTP/1.1\r\n", sniffForeign},
		{"\x00", sniffForeign},
		{"\xbb\xda", sniffForeign},
	} {
		if got := sniffProtocol([]byte(c.in)); got != c.want {
			t.Errorf("sniffProtocol(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// startUnified starts a UnifiedEcho and a grpc-go client of it; both end with the test.
func startUnified(t *testing.T, dcfg EchoConfig, tcfg TripleConfig) (*UnifiedEcho, *grpc.ClientConn) {
	t.Helper()
	u, err := StartUnifiedEcho(dcfg, tcfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	cc, err := grpc.NewClient(u.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return u, cc
}

// tripleCall makes one unary call with the checked body (key, n) and checks that the answer is its
// own message byte for byte.
func tripleCall(ctx context.Context, cc *grpc.ClientConn, key uint64, n int) error {
	msg := AppendTripleBody(nil, key, n)[GRPCPrefixLen:]
	var resp []byte
	if err := cc.Invoke(ctx, "/org.stormgate.Greeter/echo", &msg, &resp); err != nil {
		return err
	}
	if !bytes.Equal(resp, msg) {
		return errors.New("the answer is not the request's message")
	}
	return nil
}

// One port, both protocols: a Dubbo client that writes its frames a byte at a time (so the first
// bytes decide across reads) and a grpc-go client (h2c) get their echoes byte for byte, and each half
// counts only its own connection and calls.
func TestUnifiedEchoServesBoth(t *testing.T) {
	u, cc := startUnified(t, EchoConfig{}, TripleConfig{})
	c := dialRaw(t, u.Addr())
	body := AppendBody(nil, 42, 20)
	for _, b := range append(rawRequest(twoWay, 0x0102, body), dubbo.AppendHeartbeatRequest(nil, 0x0103)...) {
		if _, err := c.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	var got [dubbo.HeaderLen + 20 + 17]byte
	if _, err := io.ReadFull(c, got[:]); err != nil {
		t.Fatal(err)
	}
	if want := "dabb0214" + "0000000000000102" + "00000014" + hex.EncodeToString(body) +
		"dabb22140000000000000103000000014e"; hex.EncodeToString(got[:]) != want {
		t.Fatalf("Dubbo echo and heartbeat replies\n got %x\nwant %s", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sizes := []int{1, 16, 1000, 100_000}
	for i, n := range sizes {
		if err := tripleCall(ctx, cc, uint64(100+i), n); err != nil {
			t.Fatalf("Triple call of %d bytes: %v", n, err)
		}
	}
	st := u.Stats()
	if st.Dubbo.ConnsAccepted != 1 || st.Dubbo.Requests != 1 || st.Dubbo.Heartbeats != 1 || st.Dubbo.UniqueKeys != 1 {
		t.Errorf("Dubbo half %+v: want 1 connection, 1 request, 1 heartbeat", st.Dubbo)
	}
	if st.Triple.ConnsAccepted != 1 || st.Triple.Requests != uint64(len(sizes)) || st.Triple.Checked != uint64(len(sizes)) {
		t.Errorf("Triple half %+v: want 1 connection, %d calls", st.Triple, len(sizes))
	}
	if want := (SniffStats{ConnsAccepted: 2, Dubbo: 1, Triple: 1}); st.Sniff != want {
		t.Errorf("listener %+v, want %+v", st.Sniff, want)
	}
	if v := u.Violations(); len(v) != 0 {
		t.Errorf("violations %v", v)
	}
}

// A connection whose first bytes are neither protocol's is closed and recorded as a violation of the
// listener; one closed before its first bytes decided is only counted. Neither reaches a half. What
// a half records carries its protocol.
func TestUnifiedEchoForeignAndUndecided(t *testing.T) {
	u, _ := startUnified(t, EchoConfig{}, TripleConfig{})
	c := dialRaw(t, u.Addr())
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a foreign connection was not closed: %v", err)
	}
	early := dialRaw(t, u.Addr())
	if _, err := early.Write([]byte{dubbo.Magic0}); err != nil { // a prefix of the magic, then gone
		t.Fatal(err)
	}
	_ = early.Close()
	eventually(t, "the early close counted", func() bool { return u.Stats().Sniff.Undecided == 1 })

	dc := dialRaw(t, u.Addr())
	if _, err := dc.Write(dubbo.AppendHeartbeatReply(nil, 3, 2)); err != nil { // a response: the Dubbo half's violation
		t.Fatal(err)
	}
	eventually(t, "the Dubbo half's violation", func() bool { return u.Stats().Dubbo.Violations == 1 })
	st := u.Stats()
	if want := (SniffStats{ConnsAccepted: 3, Dubbo: 1, Foreign: 1, Undecided: 1}); st.Sniff != want {
		t.Errorf("listener %+v, want %+v", st.Sniff, want)
	}
	if st.Dubbo.ConnsAccepted != 1 || st.Triple.ConnsAccepted != 0 {
		t.Errorf("halves accepted %d Dubbo and %d Triple connections, want 1 and 0", st.Dubbo.ConnsAccepted, st.Triple.ConnsAccepted)
	}
	v := u.Violations()
	if len(v) != 2 || v[0].Protocol != "dubbo" || v[0].Kind != "unexpected frame" ||
		v[1].Protocol != "" || v[1].Kind != "unknown protocol" || v[1].Conn != 1 {
		t.Fatalf("violations %v; want the Dubbo half's unexpected frame, then the listener's unknown protocol on conn 1", v)
	}
}

// Kill ends both halves' connections at once, and one still being sniffed; nothing connects until
// Restart, which serves both protocols on the same port again. Keys seen before the kill still count.
func TestUnifiedEchoKillRestart(t *testing.T) {
	u, cc := startUnified(t, EchoConfig{}, TripleConfig{})
	addr := u.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dc := dialRaw(t, addr)
	if _, err := dc.Write(rawRequest(twoWay, 1, AppendBody(nil, 77, 40))); err != nil {
		t.Fatal(err)
	}
	readFrame(t, dc)
	if err := tripleCall(ctx, cc, 1, 64); err != nil {
		t.Fatal(err)
	}
	sniffing := dialRaw(t, addr)
	if _, err := sniffing.Write([]byte("PRI")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the third connection accepted", func() bool { return u.Stats().Sniff.ConnsAccepted == 3 })

	u.Kill()
	for name, c := range map[string]net.Conn{"Dubbo": dc, "being sniffed": sniffing} {
		if _, err := io.ReadAll(c); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("after Kill the %s connection ended with %v, want a reset", name, err)
		}
	}
	if err := tripleCall(ctx, cc, 2, 64); status.Code(err) != codes.Unavailable {
		t.Errorf("a Triple call while killed: %v, want UNAVAILABLE", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("connect succeeded while killed")
	}
	if err := u.Restart(); err != nil {
		t.Fatal(err)
	}
	if u.Addr() != addr {
		t.Fatalf("restarted on %s, was %s", u.Addr(), addr)
	}
	next := uint64(100)
	eventually(t, "a Triple call after the restart", func() bool { next++; return tripleCall(ctx, cc, next, 64) == nil })
	dc2 := dialRaw(t, addr)
	if _, err := dc2.Write(rawRequest(twoWay, 1, AppendBody(nil, 77, 40))); err != nil { // delivered before the kill
		t.Fatal(err)
	}
	readFrame(t, dc2)
	st := u.Stats()
	if st.Dubbo.Kills != 1 || st.Dubbo.Restarts != 1 || st.Triple.Restarts != 1 || st.Dubbo.ConnsAccepted != 2 || st.Triple.ConnsAccepted != 2 {
		t.Errorf("Dubbo half %+v, Triple half %+v: want one kill and one restart each, two connections each", st.Dubbo, st.Triple)
	}
	if st.Sniff.Undecided != 0 || st.Sniff.Silent != 1 {
		t.Errorf("listener %+v: want the connection Kill ended while it was being sniffed counted as silent, not undecided", st.Sniff)
	}
	if v := u.Violations(); len(v) != 1 || v[0].Protocol != "dubbo" || v[0].Kind != "duplicate key" {
		t.Errorf("violations %v, want the Dubbo half's one duplicate key", v)
	}
}
