package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/stormgate/stormgate/proxy/h2"
)

// TestH2AttacksThroughSidecar (issue 26 item 5, acceptance 4): one `sidecar run` (upstream.protocol
// triple) in front of an h2c provider gets every known HTTP/2 attack in turn, each on a fresh consumer
// connection, while a normal h2c consumer makes unary calls beside them without pause. Each attacker gets
// what a careful server answers (GOAWAY with the attack's code, or RST_STREAM on the one stream) and each
// attack is counted in /metrics (stormgate_http2_guard_trips_total{reason}, or the close reason). At the
// end the normal consumer saw no error (every answer its own bytes), each attack was followed by more of
// its calls, the sidecar still runs, and the provider saw no malformed frame, no window exceeded and no
// consumer PING.
func TestH2AttacksThroughSidecar(t *testing.T) { h2AttacksThroughSidecar(t, false) }

// TestH2AttacksDuringDrain: the same attacks while the sidecar drains (POST /drain, in its
// drain.min_duration window, when the listener still accepts and every HTTP/2 consumer, the
// attackers too, has been sent GOAWAY(2^31-1) and a PING): the guards are the same and cost the
// normal consumer nothing.
func TestH2AttacksDuringDrain(t *testing.T) { h2AttacksThroughSidecar(t, true) }

// h2AttackConfig is the sidecar's settings for the attacks: a Triple provider behind 2 connections, and
// the slow attacks' bound (a frame that takes over 1 s) short.
const h2AttackConfig = `
upstream: { protocol: triple, connections: 2 }
limits: { frame_read_timeout: 1s }
`

// TestH2AttacksTransparent: the same attacks against `sidecar run --transparent` in a pod network
// namespace, from a client namespace, to the provider's own address and port (redirected to Stormgate by
// `sidecar iptables`), the normal consumer beside them; Stormgate dials the provider at the original
// destination.
func TestH2AttacksTransparent(t *testing.T) {
	p := startTransparentPodWith(t, tpOptions{redirectPorts: strconv.Itoa(tpProviderPort), allowPorts: []int{tpProviderPort}, triple: true})
	h2AttacksOn(t, h2AttackTarget{sc: p.sidecar, prov: p.h2, dial: tpDialIn(p.cli),
		addr: netip.AddrPortFrom(p.addr, tpProviderPort).String()})
}

func h2AttacksThroughSidecar(t *testing.T, draining bool) {
	prov := startH2Provider(t)
	cfg := h2AttackConfig
	if draining {
		cfg += "drain: { min_duration: 10m }\n" // the whole test runs inside the window
	}
	sc := startSidecar(t, prov.addr(), cfg, 2)
	h2AttacksOn(t, h2AttackTarget{sc: sc, prov: prov, addr: sc.listen, draining: draining})
}

// h2AttackTarget is a sidecar under attack: the address its consumers dial (dial, when set, makes their
// sockets: in a client network namespace, say) and the provider behind it.
type h2AttackTarget struct {
	sc       *sidecar
	prov     *h2Provider
	addr     string
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	draining bool // POST /drain first: every attack is sent inside drain.min_duration
}

func h2AttacksOn(t *testing.T, tg h2AttackTarget) {
	sc, prov, draining := tg.sc, tg.prov, tg.draining
	if tg.dial == nil {
		tg.dial = (&net.Dialer{}).DialContext
	}
	normal := startNormalH2Consumer(t, tg.addr, tg.dial)
	if draining {
		resp, err := sc.http.Post("http://"+sc.admin+"/drain", "text/plain", nil)
		if err != nil {
			t.Fatalf("POST /drain: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST /drain: %s", resp.Status)
		}
		sc.waitMetric(t, 10*time.Second, "stormgate_http2_goaways_total", func(v float64) bool { return v >= 1 },
			`direction="sent"`)
	}
	for _, a := range h2Attacks {
		t.Run(a.name, func(t *testing.T) {
			before, err := sc.scrape()
			if err != nil {
				t.Fatal(err)
			}
			calls := normal.ok.Load()
			a.run(&attacker{t: t, addr: tg.addr, dialer: tg.dial})
			for reason, n := range a.counted {
				name, label := "stormgate_http2_guard_trips_total", reason
				if r, ok := strings.CutPrefix(reason, "closed:"); ok {
					name, label = "stormgate_downstream_closed_total", r
				}
				want := before.Sum(name, `reason="`+label+`"`) + n
				sc.waitMetric(t, 10*time.Second, name, func(v float64) bool { return v >= want }, `reason="`+label+`"`)
			}
			if !poll(10*time.Second, func() bool { return normal.ok.Load() > calls }) {
				t.Errorf("the normal consumer made no call during and after the attack")
			}
		})
	}
	normal.stop(t)
	if sc.Exited() {
		t.Fatalf("the sidecar exited: %v", sc.Err())
	}
	t.Logf("the normal consumer: %d calls answered, %d errors", normal.ok.Load(), normal.errs.Load())
	if n := normal.errs.Load(); n != 0 {
		t.Errorf("the normal consumer saw %d errors, first: %s", n, normal.firstErr.Load())
	}
	malformed, pings, answered, resets := prov.report()
	t.Logf("the provider: %d streams answered, %d reset by Stormgate, %d PINGs", answered, resets, len(pings))
	for _, m := range malformed {
		t.Errorf("the provider saw: %s", m)
	}
	for _, p := range pings {
		if p == attackPing || p == alivePing {
			t.Errorf("a consumer's PING reached the provider: % x", p)
			break
		}
	}
	if n := sc.metric(t, "stormgate_upstream_connections"); n != 2 {
		t.Errorf("stormgate_upstream_connections %v after the attacks, want 2", n)
	}
}

// h2Attack is one attack: run sends it and checks what the attacker gets back; counted is what /metrics
// must count for it (a guard's reason, or "closed:" and a close reason), at least that many times.
type h2Attack struct {
	name    string
	run     func(a *attacker)
	counted map[string]float64
}

// attackPing and alivePing mark every PING an attacker sends, so the provider can tell that none reached
// it (Stormgate's own PINGs carry a counter).
var (
	attackPing = [8]byte{'a', 't', 't', 'a', 'c', 'k', '!', '!'}
	alivePing  = [8]byte{'a', 'l', 'i', 'v', 'e', '?'}
)

var h2Attacks = []h2Attack{
	{"rapid_reset", func(a *attacker) {
		// CVE-2023-44487: open a stream, reset it at once, repeat (at most 10,000 times).
		a.handshake()
		sent := a.flood(10000, func(i int) error {
			id := uint32(2*i + 1)
			if err := a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: a.head(), EndHeaders: true}); err != nil {
				return err
			}
			return a.fr.WriteRSTStream(id, http2.ErrCodeCancel)
		}, func() { a.wantGoAway(http2.ErrCodeEnhanceYourCalm) })
		a.t.Logf("%d streams opened and reset before the GOAWAY", sent)
	}, map[string]float64{"rapid_reset": 1, "closed:http2_error": 1}},

	{"continuation_flood", func(a *attacker) {
		// CVE-2024-27316 family: a header block that never ends, in CONTINUATION frames (at most 100).
		a.handshake()
		head := a.head()
		a.flood(101, func(i int) error {
			if i == 0 {
				return a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: head[:4]})
			}
			return a.fr.WriteContinuation(1, false, []byte{0x40, 1, 'x', 1, 'y'})
		}, func() { a.wantGoAway(http2.ErrCodeEnhanceYourCalm) })
	}, map[string]float64{"continuation_flood": 1, "closed:http2_error": 1}},

	{"ping_flood", func(a *attacker) {
		a.handshake()
		a.flood(10000, func(int) error { return a.fr.WritePing(false, attackPing) },
			func() { a.wantGoAway(http2.ErrCodeEnhanceYourCalm) })
	}, map[string]float64{"ping_flood": 1, "closed:http2_error": 1}},

	{"settings_flood", func(a *attacker) {
		a.handshake()
		a.flood(10000, func(int) error { return a.fr.WriteSettings() },
			func() { a.wantGoAway(http2.ErrCodeEnhanceYourCalm) })
	}, map[string]float64{"settings_flood": 1, "closed:http2_error": 1}},

	{"empty_frames", func(a *attacker) {
		// A stream, then DATA frames with no payload and no END_STREAM (at most 100).
		a.handshake()
		a.flood(101, func(i int) error {
			if i == 0 {
				return a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: a.head(), EndHeaders: true})
			}
			return a.fr.WriteData(1, false, nil)
		}, func() { a.wantGoAway(http2.ErrCodeEnhanceYourCalm) })
	}, map[string]float64{"empty_frames": 1, "closed:http2_error": 1}},

	{"header_list_size", func(a *attacker) {
		// A header list of about 80,000 bytes (over the 64 KiB bound) in a block of about 50,000 (20 fields
		// of 4,000 bytes, Huffman-coded): the stream is refused, the connection and its HPACK state live.
		a.handshake()
		a.bigHeaders(20, 4000)
		a.wantReset(1, http2.ErrCodeEnhanceYourCalm)
		a.wantAlive()
		// One value longer than the whole list may be: the decoder cannot skip it and stay in step with
		// the peer (x/net's hpack stops at its string bound), so the connection ends.
		a.handshake()
		a.bigHeaders(1, 80000)
		a.wantGoAway(http2.ErrCodeCompression)
	}, map[string]float64{"header_list_size": 1, "closed:http2_error": 1}},

	{"too_many_streams", func(a *attacker) {
		// One stream more than the SETTINGS_MAX_CONCURRENT_STREAMS Stormgate announced (and the attacker
		// acknowledged), all left open: the last is refused, the connection lives.
		limit := a.handshake()
		for i := range limit + 1 {
			a.must(a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: a.head(), EndHeaders: true}))
		}
		a.wantReset(uint32(2*limit+1), http2.ErrCodeRefusedStream)
		a.wantAlive()
	}, map[string]float64{"too_many_streams": 1}},

	{"zero_window_stall", func(a *attacker) {
		// A stream window of 0, never opened, while the answer waits: reset after limits.frame_read_timeout
		// (1 s here); the connection lives.
		a.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		a.request(1, []byte("stalled answer"))
		start := time.Now()
		a.wantReset(1, http2.ErrCodeCancel)
		a.t.Logf("reset %v after the request", time.Since(start).Round(time.Millisecond))
		a.wantAlive()
	}, map[string]float64{"zero_window_stall": 1}},

	{"stream_id_backwards", func(a *attacker) {
		a.handshake()
		a.request(5, []byte("five"))
		a.must(a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: a.head(), EndHeaders: true, EndStream: true}))
		a.wantGoAway(http2.ErrCodeProtocol)
	}, map[string]float64{"stream_id": 1, "closed:http2_error": 1}},

	{"closed_stream", func(a *attacker) {
		// DATA on a stream that ended both ways: RST_STREAM STREAM_CLOSED. HEADERS on one: GOAWAY.
		a.handshake()
		a.request(1, []byte("one"))
		a.wantAnswer(1)
		a.must(a.fr.WriteData(1, false, []byte("after the end")))
		a.wantReset(1, http2.ErrCodeStreamClosed)
		a.request(3, []byte("three"))
		a.wantAnswer(3)
		a.must(a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: a.head(), EndHeaders: true, EndStream: true}))
		a.wantGoAway(http2.ErrCodeStreamClosed)
	}, map[string]float64{"closed_stream": 2, "closed:http2_error": 1}},

	{"malformed_preface", func(a *attacker) {
		// A preface that is not HTTP/2's: closed as foreign bytes. The right preface and then a first
		// frame other than SETTINGS: GOAWAY PROTOCOL_ERROR.
		a.dial()
		_, err := io.WriteString(a.nc, "PRI * HTTP/1.1\r\n\r\nSM\r\n\r\n")
		a.must(err)
		a.wantClosed()
		a.dial()
		_, err = io.WriteString(a.nc, http2.ClientPreface)
		a.must(err)
		a.must(a.fr.WritePing(false, attackPing))
		a.wantGoAway(http2.ErrCodeProtocol)
	}, map[string]float64{"preface": 1, "closed:bad_magic": 1, "closed:http2_error": 1}},
}

// attacker is one attack's consumer connection, driven by hand with x/net's Framer.
type attacker struct {
	t      *testing.T
	addr   string
	dialer func(ctx context.Context, network, addr string) (net.Conn, error) // nil: net.Dialer's
	nc     net.Conn
	fr     *http2.Framer
	sent   bool // the first header block went out (it carries the table size update)
}

func (a *attacker) must(err error) {
	a.t.Helper()
	if err != nil {
		a.t.Fatal(err)
	}
}

// dial opens a fresh connection (closed when the test ends), all of whose reads and writes must be done
// within 15 s.
func (a *attacker) dial() {
	a.t.Helper()
	dial := a.dialer
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	nc, err := dial(context.Background(), "tcp", a.addr)
	a.must(err)
	a.t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(15 * time.Second))
	a.nc, a.fr, a.sent = nc, http2.NewFramer(nc, bufio.NewReader(nc)), false
}

// handshake dials, sends the preface and SETTINGS, acknowledges Stormgate's and waits for the ACK of its
// own. It returns the SETTINGS_MAX_CONCURRENT_STREAMS Stormgate announced.
func (a *attacker) handshake(settings ...http2.Setting) (maxStreams int) {
	a.t.Helper()
	a.dial()
	_, err := io.WriteString(a.nc, http2.ClientPreface)
	a.must(err)
	a.must(a.fr.WriteSettings(settings...))
	for acked, got := false, false; !acked || !got; {
		f, err := a.fr.ReadFrame()
		a.must(err)
		if sf, ok := f.(*http2.SettingsFrame); ok {
			if sf.IsAck() {
				acked = true
				continue
			}
			got = true
			if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); ok {
				maxStreams = int(v)
			}
			a.must(a.fr.WriteSettingsAck())
		}
	}
	return maxStreams
}

// requestFields is a gRPC request head for the provider's echo.
func requestFields() []h2.HeaderField {
	return []h2.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/stormgate.Test/Echo"}, {Name: ":authority", Value: "stormgate"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}
}

// head is requestFields encoded without a dynamic table; the first block on a connection begins with the
// dynamic table size update Stormgate requires once its SETTINGS_HEADER_TABLE_SIZE 0 is acknowledged.
func (a *attacker) head() []byte {
	b := h2.AppendFields(nil, requestFields())
	if !a.sent {
		a.sent = true
		b = append([]byte{0x20}, b...)
	}
	return b
}

// bigHeaders sends a request on stream 1 with n extra fields of size bytes each (one byte repeated, so
// Huffman makes the block about 5/8 of the list), in HEADERS and CONTINUATION frames of 16 KiB.
func (a *attacker) bigHeaders(n, size int) {
	a.t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	enc.SetMaxDynamicTableSizeLimit(0) // the first block begins with the table size update
	for _, f := range requestFields() {
		a.must(enc.WriteField(hpack.HeaderField{Name: f.Name, Value: f.Value}))
	}
	for i := range n {
		a.must(enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-big-%d", i), Value: strings.Repeat("a", size)}))
	}
	block := hb.Bytes()
	const chunk = 16384
	a.must(a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:min(chunk, len(block))],
		EndStream: true, EndHeaders: len(block) <= chunk}))
	for off := chunk; off < len(block); off += chunk {
		end := min(off+chunk, len(block))
		a.must(a.fr.WriteContinuation(1, end == len(block), block[off:end]))
	}
}

// request sends a whole gRPC call on stream id.
func (a *attacker) request(id uint32, msg []byte) {
	a.t.Helper()
	a.must(a.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: a.head(), EndHeaders: true}))
	a.must(a.fr.WriteData(id, true, grpcFrame(msg)))
}

// flood calls send(i) for i = 0, 1, ... up to n times from a goroutine of its own, until a write fails
// (Stormgate closed the connection), while answer reads on this one; it returns how many sends succeeded.
func (a *attacker) flood(n int, send func(i int) error, answer func()) int {
	var sent atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			if send(i) != nil {
				return
			}
			sent.Add(1)
		}
	}()
	answer()
	_ = a.nc.Close() // the sender's next write fails
	<-done
	return int(sent.Load())
}

// next reads the next frame, failing the test on an error.
func (a *attacker) next(what string) http2.Frame {
	a.t.Helper()
	f, err := a.fr.ReadFrame()
	if err != nil {
		a.t.Fatalf("waiting for %s: %v", what, err)
	}
	return f
}

// wantGoAway reads until a GOAWAY, which must carry code, and then until Stormgate closes the connection.
func (a *attacker) wantGoAway(code http2.ErrCode) {
	a.t.Helper()
	for {
		if g, ok := a.next("GOAWAY " + code.String()).(*http2.GoAwayFrame); ok {
			if g.ErrCode == http2.ErrCodeNo && g.LastStreamID == 1<<31-1 && code != http2.ErrCodeNo {
				continue // a drain's first GOAWAY (TestH2AttacksDuringDrain): it closes nothing yet
			}
			if g.ErrCode != code {
				a.t.Fatalf("GOAWAY %v (%q), want %v", g.ErrCode, g.DebugData(), code)
			}
			a.t.Logf("GOAWAY %v %q", g.ErrCode, g.DebugData())
			break
		}
	}
	a.wantClosed()
}

// wantClosed reads until Stormgate closes the connection (shuts its side: it keeps reading a while, so
// that the consumer gets every byte sent before), then closes this side.
func (a *attacker) wantClosed() {
	a.t.Helper()
	_, err := io.Copy(io.Discard, a.nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		a.t.Fatal("the connection was not closed")
	}
	_ = a.nc.Close()
}

// wantReset reads until a RST_STREAM on stream id, which must carry code; a GOAWAY fails the test.
func (a *attacker) wantReset(id uint32, code http2.ErrCode) {
	a.t.Helper()
	for {
		switch f := a.next(fmt.Sprintf("RST_STREAM %v on stream %d", code, id)).(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID != id || f.ErrCode != code {
				a.t.Fatalf("RST_STREAM %v on stream %d, want %v on %d", f.ErrCode, f.StreamID, code, id)
			}
			return
		case *http2.GoAwayFrame:
			a.t.Fatalf("GOAWAY %v %q, want RST_STREAM %v on stream %d", f.ErrCode, f.DebugData(), code, id)
		}
	}
}

// wantAnswer reads until stream id's trailers (END_STREAM).
func (a *attacker) wantAnswer(id uint32) {
	a.t.Helper()
	for {
		f := a.next(fmt.Sprintf("the answer on stream %d", id))
		if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == id && h.StreamEnded() {
			return
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			a.t.Fatalf("GOAWAY %v before the answer on stream %d", g.ErrCode, id)
		}
	}
}

// wantAlive checks that the connection still serves: a PING gets its answer, no GOAWAY on the way.
func (a *attacker) wantAlive() {
	a.t.Helper()
	a.must(a.fr.WritePing(false, alivePing))
	for {
		switch f := a.next("the PING's answer").(type) {
		case *http2.PingFrame:
			if f.IsAck() && f.Data == alivePing {
				return
			}
		case *http2.GoAwayFrame:
			a.t.Fatalf("GOAWAY %v %q: the connection should live", f.ErrCode, f.DebugData())
		}
	}
}

// grpcFrame is msg in gRPC's length-prefixed framing.
func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// normalH2Consumer makes unary calls through Stormgate on one h2c connection (x/net's client), two at a
// time, each with a unique body that must come back byte for byte with grpc-status 0.
type normalH2Consumer struct {
	ok, errs atomic.Int64
	firstErr atomic.Value // string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func startNormalH2Consumer(t *testing.T, addr string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *normalH2Consumer {
	t.Helper()
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, _ string, _ *tls.Config) (net.Conn, error) {
		return dial(ctx, network, addr)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	n := &normalH2Consumer{cancel: cancel}
	t.Cleanup(func() { n.cancel(); n.wg.Wait(); tr.CloseIdleConnections() })
	for w := range 2 {
		n.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				msg := fmt.Appendf(nil, "normal %d/%d %s", w, i, bytes.Repeat([]byte{byte('a' + (i+w)%26)}, i%4096))
				err := unaryEcho(ctx, tr, msg)
				switch {
				case err == nil:
					n.ok.Add(1)
				case ctx.Err() == nil:
					if n.errs.Add(1) == 1 {
						n.firstErr.Store(fmt.Sprintf("call %d/%d: %v", w, i, err))
					}
				}
			}
		})
	}
	return n
}

// stop ends the calls and waits for the ones in flight.
func (n *normalH2Consumer) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	n.wg.Wait()
}

// unaryEcho is one gRPC unary call: the answer must be exactly msg, with grpc-status 0.
func unaryEcho(ctx context.Context, tr *http2.Transport, msg []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	want := grpcFrame(msg)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://stormgate/stormgate.Test/Echo", bytes.NewReader(want))
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	req.ContentLength = int64(len(want))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("body after %d bytes: %w", len(body), err)
	}
	if st := resp.Trailer.Get("grpc-status") + resp.Header.Get("grpc-status"); st != "0" || !bytes.Equal(body, want) {
		return fmt.Errorf("grpc-status %q (%s), %d bytes back of %d, own %v", st,
			resp.Trailer.Get("grpc-message")+resp.Header.Get("grpc-message"), len(body), len(want), bytes.Equal(body, want))
	}
	return nil
}
