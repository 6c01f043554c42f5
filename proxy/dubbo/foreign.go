package dubbo

import (
	"bytes"
	"fmt"
	"strconv"
)

// Peer is what sent bytes that cannot start a Dubbo frame, judged from those bytes.
type Peer uint8

// Peers.
const (
	PeerUnknown Peer = iota // binary, none of the below
	PeerHTTP2               // an HTTP/2 connection preface: a Triple or gRPC client, an h2 health check
	PeerHTTP1               // an HTTP/1 request line: curl, a browser, an HTTP health check
	PeerTLS                 // a TLS record: a consumer configured for TLS
	PeerText                // a line of text: telnet, nc, a Dubbo QoS/telnet command such as "ls"
)

// http2Preface starts every HTTP/2 connection (RFC 9113, section 3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

var httpMethods = []string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "}

// ForeignPeer says what sent b, the first bytes of a stream whose magic is wrong. A prefix of a
// marker counts when at least three bytes of it are there (bytes arrive as they arrive).
func ForeignPeer(b []byte) Peer {
	has := func(marker string) bool {
		n := min(len(b), len(marker))
		return n >= 3 && string(b[:n]) == marker[:n]
	}
	switch {
	case has(http2Preface):
		return PeerHTTP2
	case len(b) >= 3 && b[0] == 0x16 && b[1] == 0x03 && b[2] <= 0x04:
		return PeerTLS
	}
	for _, m := range httpMethods {
		if has(m) {
			return PeerHTTP1
		}
	}
	if len(b) == 0 {
		return PeerUnknown
	}
	for _, c := range b {
		if (c < 0x20 || c > 0x7e) && c != '\r' && c != '\n' && c != '\t' {
			return PeerUnknown
		}
	}
	return PeerText
}

// DescribeForeign is one line for the log about bytes that cannot start a Dubbo frame: what they
// are, what sent them, and what to change.
func DescribeForeign(b []byte) string {
	shown := b[:min(len(b), 16)]
	q := strconv.Quote(string(shown))
	if !bytes.ContainsFunc(shown, func(r rune) bool { return r >= 0x20 && r <= 0x7e }) {
		q = fmt.Sprintf("% x", shown)
	}
	switch ForeignPeer(b) {
	case PeerHTTP2:
		return "not Dubbo 2: the first bytes " + q + " are an HTTP/2 connection preface (a Triple or gRPC client, " +
			"or an HTTP/2 health check); this listener speaks Dubbo 2 (dubbo://) only"
	case PeerHTTP1:
		return "not Dubbo 2: the first bytes " + q + " are an HTTP/1 request (curl, a browser, an HTTP health check); " +
			"this listener speaks Dubbo 2 only: probe /healthz and /readyz on the metrics listener"
	case PeerTLS:
		return "not Dubbo 2: the first bytes " + q + " are a TLS handshake (a consumer configured for TLS); " +
			"this listener speaks plaintext Dubbo 2"
	case PeerText:
		return "not Dubbo 2: the first bytes " + q + " are text (telnet, nc, a Dubbo QoS/telnet command such as ls); " +
			"this listener speaks Dubbo 2 only and answers no telnet commands"
	}
	return "not Dubbo 2: the first bytes " + q + " do not start with the Dubbo magic da bb"
}

// ForeignReply is what to write, before closing, to a peer that sent b at the start of a
// connection: a line for a person at a terminal (Java Dubbo answers telnet commands on its port,
// so operators try them), an HTTP response for an HTTP/1 client; nil for the others, which could
// not read either.
func ForeignReply(b []byte) []byte {
	const line = "stormgate: this port is Stormgate's Dubbo listener (the Dubbo provider is behind it): " +
		"it does not answer telnet or QoS commands; use the provider's QoS port (22222 by default)\r\n"
	switch ForeignPeer(b) {
	case PeerText:
		return []byte(line)
	case PeerHTTP1:
		return []byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n" +
			"Content-Length: " + strconv.Itoa(len(line)) + "\r\n\r\n" + line)
	}
	return nil
}
