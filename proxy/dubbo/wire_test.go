package dubbo

import (
	"errors"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/proxy/wire"
)

// Issue 24: what a non-Dubbo client is told and what the log says: one line, once, saying what the
// bytes look like (it was "bad magic\ndubbo: bad magic").
func TestForeignInputMessages(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		reply    string // substring of what the peer is told; "" for nothing
	}{
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", `not Dubbo 2: the first bytes "PRI * HTTP/2.0\r\n" are an HTTP/2 connection preface (a Triple or gRPC client`, ""},
		{"ls\r\n", `not Dubbo 2: the first bytes "ls\r\n" are text (telnet, nc, a Dubbo QoS/telnet command such as ls)`, "it does not answer telnet or QoS commands"},
		{"GET /healthz HTTP/1.1\r\n", `are an HTTP/1 request`, "HTTP/1.1 400 Bad Request\r\n"},
		{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", `are a TLS handshake`, ""},
		{"\xca\xfe\xba\xbe\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", `the first bytes ca fe ba be 00 00 00 00 00 00 00 00 00 00 00 00 do not start with the Dubbo magic da bb`, ""},
	} {
		hdr := []byte(tc.in)[:min(len(tc.in), HeaderLen)]
		_, err := Codec{}.ParseHeader(hdr, 0)
		var fe *wire.ForeignError
		if !errors.As(err, &fe) || !errors.Is(err, wire.ErrBadMagic) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %q, want one line with %q", tc.in, err, tc.want)
			continue
		}
		if (tc.reply == "") != (fe.Reply == nil) || !strings.Contains(string(fe.Reply), tc.reply) {
			t.Errorf("%q: reply %q, want %q", tc.in, fe.Reply, tc.reply)
		}
	}
	// The other refusals are one line too.
	big := []byte{0xda, 0xbb, 0xc2, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0x7f, 0, 0, 0}
	if _, err := (Codec{}).ParseHeader(big, 0); !errors.Is(err, wire.ErrFrameTooLarge) || strings.Contains(err.Error(), "\n") {
		t.Errorf("oversize: %q", err)
	}
	if _, err := (Codec{}).ParseHeader(big[:5], 0); !errors.Is(err, wire.ErrShortHeader) {
		t.Errorf("a header still arriving: %v", err)
	}
}
