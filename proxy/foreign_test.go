package proxy

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
	"github.com/stormgate/stormgate/proxy/wire"
)

// Issue 24: bytes that cannot start a frame are refused as soon as they arrive, not when a whole
// header has (a telnet "ls\r\n" waited frame_read_timeout, 30 s); a frame arriving one byte at a
// time is still read whole.
func TestFrameReaderRefusesForeignBytesAtOnce(t *testing.T) {
	var b Budget
	b.limit.Store(1 << 20)
	for _, in := range []string{"l", "ls\r\n", "\xda\x00", "PRI * HT"} {
		var fr frameReader
		src := &sliceSource{b: []byte(in)}
		_, _, res, err := fr.next(src, dubbo.Codec{}, 1<<20, false, &b, 1)
		if res != readBad || !errors.Is(err, wire.ErrBadMagic) || fr.partial() || fr.partialSince() != 0 {
			t.Errorf("%q: result %v, err %v, partial %v", in, res, err, fr.partial())
		}
	}
	frame := dubbo.AppendRequest(nil, 7, true, svc, "echo", "one byte at a time")
	var fr frameReader
	src := &sliceSource{}
	for i, c := range frame {
		src.b = append(src.b, c)
		f, got, res, err := fr.next(src, dubbo.Codec{}, 1<<20, false, &b, 1)
		if err != nil {
			t.Fatalf("byte %d: %v", i, err)
		}
		if i < len(frame)-1 && res != readMore {
			t.Fatalf("byte %d: result %v", i, res)
		}
		if i == len(frame)-1 && (res != readFrame || f.ID != 7 || string(got) != string(frame)) {
			t.Fatalf("last byte: result %v id %d", res, f.ID)
		}
	}
}

// Issue 24, on a real socket: a telnet-style command gets a line saying what this port is and is
// closed at once (frame_read_timeout is 30 s here); an HTTP/2 client is closed without a byte; both
// are counted as bad magic and no neighbour notices.
func TestForeignClientsClosedAtOnce(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.FrameReadTimeout = 30 * time.Second })
	for _, tc := range []struct {
		name, in, reply string
	}{
		{"telnet ls", "ls\r\n", "stormgate: this port is Stormgate's Dubbo listener"},
		{"http2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00", ""},
		{"curl", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.srv.Stats().Closed[CloseBadMagic.String()]
			nc, err := net.Dial("tcp", f.ln.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			start := time.Now()
			if _, err := nc.Write([]byte(tc.in)); err != nil {
				t.Fatal(err)
			}
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(nc)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("not closed within 10 s (frame_read_timeout is 30 s); got %q", got)
			}
			if tc.reply == "" && len(got) > 0 || !strings.HasPrefix(string(got), tc.reply) {
				t.Errorf("told %q, want %q", got, tc.reply)
			}
			waitFor(t, 2*time.Second, "close counted", func() bool { return f.srv.Stats().Closed[CloseBadMagic.String()] == before+1 })
			t.Logf("closed %v after the bytes", time.Since(start).Round(time.Millisecond))
		})
	}
	if ps := f.provider.Stats(); ps.BadFrames != 0 || ps.Requests != 0 {
		t.Errorf("provider saw %+v", ps)
	}
}
