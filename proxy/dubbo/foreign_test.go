package dubbo

import (
	"strconv"
	"strings"
	"testing"
)

// What sent bytes that are not Dubbo is judged from as few as three of them; a person at a terminal
// is told what the port is, an HTTP/1 client gets a readable 400, the others nothing.
func TestForeignPeer(t *testing.T) {
	for _, tc := range []struct {
		in    string
		peer  Peer
		reply string
	}{
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", PeerHTTP2, ""},
		{"PRI", PeerHTTP2, ""},
		{"PR", PeerText, "it does not answer telnet or QoS commands"},
		{"GET / HTTP/1.1\r\n", PeerHTTP1, "HTTP/1.1 400 Bad Request\r\n"},
		{"POS", PeerHTTP1, "HTTP/1.1 400"},
		{"\x16\x03\x01\x00\xa5", PeerTLS, ""},
		{"ls\r\n", PeerText, "Stormgate's Dubbo listener"},
		{"invoke org.Foo.bar(\"x\")\n", PeerText, "QoS port (22222 by default)"},
		{"\x00\x01\x02", PeerUnknown, ""},
		{"", PeerUnknown, ""},
		{"l\xff", PeerUnknown, ""},
	} {
		if got := ForeignPeer([]byte(tc.in)); got != tc.peer {
			t.Errorf("%q: peer %d, want %d", tc.in, got, tc.peer)
		}
		r := string(ForeignReply([]byte(tc.in)))
		if (tc.reply == "") != (r == "") || !strings.Contains(r, tc.reply) {
			t.Errorf("%q: reply %q, want %q", tc.in, r, tc.reply)
		}
		if d := DescribeForeign([]byte(tc.in)); strings.ContainsAny(d, "\r\n") || !strings.HasPrefix(d, "not Dubbo 2: the first bytes ") {
			t.Errorf("%q: description %q", tc.in, d)
		}
	}
	// The HTTP/1 reply's Content-Length is its body's.
	r := string(ForeignReply([]byte("GET /")))
	head, body, _ := strings.Cut(r, "\r\n\r\n")
	if !strings.Contains(head, "Content-Length: "+strconv.Itoa(len(body))) {
		t.Errorf("reply %q", r)
	}
}
