package xds

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// An ADS stream is one gRPC call, AggregatedDiscoveryService/StreamAggregatedResources,
// made here with net/http's HTTP/2 client and the gRPC wire format
// (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) instead of grpc-go:
//
//	request   POST /envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources
//	          content-type application/grpc, te trailers; over h2c (plaintext, prior knowledge)
//	          or TLS with ALPN h2
//	messages  both ways: 1 byte compressed flag (always 0: no grpc-encoding is offered, so
//	          the server sends none), 4 bytes big-endian length, the protobuf message
//	end       the response's trailers (or, for an immediate failure, its headers:
//	          trailers-only) carry grpc-status and grpc-message; 0 is OK
//	liveness  an HTTP/2 PING when nothing arrived for adsPingAfter, the connection
//	          closed when its answer takes over adsPingTimeout (grpc-go's client
//	          keepalive of 5 min / 20 s, which grpc-go servers accept by default)
//
// The server answers headers only once it sends its first message, so the first
// request travels in the request body from the start and the call returns when the
// first response's headers arrive.

const (
	adsPath        = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
	adsPingAfter   = 5 * time.Minute
	adsPingTimeout = 20 * time.Second
	// adsMaxMessage bounds a message read from the control plane (grpc-go's
	// default receive limit is 4 MiB; a Settings resource is a few hundred bytes).
	adsMaxMessage = 16 << 20
)

// adsStream is one open ADS call. Send and Recv may be used from different
// goroutines (one each); Close ends the call.
type adsStream struct {
	pw    *io.PipeWriter
	resp  *http.Response
	hdr   [5]byte
	close func()
}

// openADS opens the call to addr (host:port) and sends first. tlsConf nil means
// plaintext (h2c). dialTimeout bounds the TCP connect, the server's first byte
// (speakingDialer) and the TLS handshake. ctx bounds the whole call: cancelling
// it ends the stream.
func openADS(ctx context.Context, addr string, tlsConf *tls.Config, dialTimeout time.Duration, first *adsRequest) (*adsStream, error) {
	msg, err := first.marshal()
	if err != nil {
		return nil, err
	}
	protos := new(http.Protocols)
	scheme := "http"
	var notes *tlsNotes
	if tlsConf != nil {
		tlsConf, notes = noteClientCert(tlsConf)
		protos.SetHTTP2(true)
		scheme = "https"
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	dialer := &speakingDialer{timeout: dialTimeout}
	// One transport, so one connection, per stream: which address to use and how
	// long to wait before the next try are the client's decisions (Client.Run).
	tr := &http.Transport{
		Protocols:           protos,
		TLSClientConfig:     tlsConf,
		DialContext:         dialer.dial,
		TLSHandshakeTimeout: dialTimeout,
		DisableCompression:  true,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: adsPingAfter,
			PingTimeout:     adsPingTimeout,
		},
	}
	pr, pw := io.Pipe()
	// The transport notices a cancelled context only between reads of the request
	// body, and it is blocked in one for as long as the client has nothing to send:
	// ending the body is what ends the call.
	unwatch := context.AfterFunc(ctx, func() { _ = pw.CloseWithError(context.Cause(ctx)) })
	body := struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(frame(msg)), pr), pr}
	u := url.URL{Scheme: scheme, Host: addr, Path: adsPath}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		unwatch()
		tr.CloseIdleConnections()
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", "stormgate-xds")
	req.ContentLength = -1
	resp, err := tr.RoundTrip(req)
	if err != nil {
		if dialer.silent.Load() {
			err = fmt.Errorf("%s accepted the connection but sent nothing within %v (hung, or not an xDS server)", addr, dialTimeout)
		}
		err = notes.explain(err)
		unwatch()
		_ = pw.CloseWithError(err)
		tr.CloseIdleConnections()
		return nil, err
	}
	s := &adsStream{pw: pw, resp: resp}
	s.close = func() {
		unwatch()
		_ = pw.CloseWithError(io.ErrClosedPipe)
		_ = resp.Body.Close()
		tr.CloseIdleConnections()
	}
	if err := s.checkHeaders(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// tlsNotes records what a TLS handshake asked of the client certificate. In TLS
// 1.3 a server checks the client's certificate after the handshake and refuses it
// with an alert; the HTTP/2 client, writing its request by then, often sees only
// the broken pipe that follows, which would leave the operator guessing.
type tlsNotes struct {
	asked, sent atomic.Bool
}

// noteClientCert returns a copy of c that records in the notes whether the server
// asked for a client certificate and whether one was sent.
func noteClientCert(c *tls.Config) (*tls.Config, *tlsNotes) {
	n := &tlsNotes{}
	c = c.Clone()
	get := c.GetClientCertificate
	c.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		n.asked.Store(true)
		cert := &tls.Certificate{}
		if get != nil {
			var err error
			if cert, err = get(cri); err != nil {
				return nil, err
			}
		} else if len(c.Certificates) > 0 {
			cert = &c.Certificates[0]
		}
		n.sent.Store(cert != nil && len(cert.Certificate) > 0)
		return cert, nil
	}
	return c, n
}

// explain adds to a failed call what the handshake suggests, unless err already
// names the certificate (the server's alert was read in time).
func (n *tlsNotes) explain(err error) error {
	if n == nil || !n.asked.Load() || strings.Contains(err.Error(), "certificate") {
		return err
	}
	if !n.sent.Load() {
		return fmt.Errorf("%w (the control plane asked for a client certificate and none is configured: --xds-cert and --xds-key)", err)
	}
	return fmt.Errorf("%w (the control plane asked for this sidecar's client certificate and then closed the connection: it probably refused the certificate, expired or not signed by a CA it trusts)", err)
}

// speakingDialer dials with a timeout and closes a connection on which the
// server has sent no byte (its HTTP/2 SETTINGS, or its TLS ServerHello) within
// that timeout of connecting: a process that accepts connections and says
// nothing (wedged, or not an xDS server) costs the connect timeout, as a refused
// or silent address does, not the first-response timeout.
type speakingDialer struct {
	timeout time.Duration
	silent  atomic.Bool // a connection was closed for saying nothing
}

func (d *speakingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: d.timeout, KeepAlive: 30 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	sc := &speakingConn{Conn: c}
	sc.timer = time.AfterFunc(d.timeout, func() {
		if !sc.spoke.Load() {
			d.silent.Store(true)
			_ = c.Close()
		}
	})
	return sc, nil
}

// speakingConn notes the first byte read from the server.
type speakingConn struct {
	net.Conn
	spoke atomic.Bool
	timer *time.Timer
}

func (c *speakingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.spoke.Load() {
		c.spoke.Store(true)
		c.timer.Stop()
	}
	return n, err
}

func (c *speakingConn) Close() error {
	c.timer.Stop()
	return c.Conn.Close()
}

// frame prefixes a message with gRPC's 5-byte header.
func frame(msg []byte) []byte {
	b := make([]byte, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(msg)))
	copy(b[5:], msg)
	return b
}

// checkHeaders turns a response that is not a gRPC stream, or a trailers-only
// failure, into an error.
func (s *adsStream) checkHeaders() error {
	h := s.resp.Header
	if st := h.Get("Grpc-Status"); st != "" { // trailers-only: the call failed at once
		return statusFrom(st, h.Get("Grpc-Message"))
	}
	if s.resp.StatusCode != http.StatusOK {
		return fmt.Errorf("control plane answered HTTP %d, not a gRPC stream (is %s an xDS server?)", s.resp.StatusCode, s.resp.Request.URL.Host)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
		return fmt.Errorf("control plane answered content-type %q, not application/grpc", ct)
	}
	return nil
}

// Send writes one request.
func (s *adsStream) Send(r *adsRequest) error {
	msg, err := r.marshal()
	if err != nil {
		return err
	}
	if _, err := s.pw.Write(frame(msg)); err != nil {
		return fmt.Errorf("sending on the ADS stream: %w", err)
	}
	return nil
}

// Recv reads one response. At the end of the stream it returns the call's
// status as an error (*grpcError; io.EOF for an OK status, which an ADS server
// never sends while the client is there).
func (s *adsStream) Recv() (*adsResponse, error) {
	if _, err := io.ReadFull(s.resp.Body, s.hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, s.trailerStatus()
		}
		return nil, err
	}
	if s.hdr[0] != 0 {
		return nil, errors.New("control plane sent a compressed message, which was not offered")
	}
	n := binary.BigEndian.Uint32(s.hdr[1:])
	if n > adsMaxMessage {
		return nil, fmt.Errorf("control plane sent a message of %d bytes (limit %d)", n, adsMaxMessage)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(s.resp.Body, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return unmarshalResponse(b)
}

// trailerStatus is the call's status once the body has ended.
func (s *adsStream) trailerStatus() error {
	t := s.resp.Trailer
	st := t.Get("Grpc-Status")
	if st == "" {
		return errors.New("ADS stream ended without a gRPC status")
	}
	if err := statusFrom(st, t.Get("Grpc-Message")); err != nil {
		return err
	}
	return io.EOF
}

// Close ends the call and its connection.
func (s *adsStream) Close() { s.close() }

// grpcError is a gRPC status other than OK that ended a call.
type grpcError struct {
	Code    int
	Message string
}

func (e *grpcError) Error() string { return codeName(e.Code) + ": " + e.Message }

// statusFrom reads grpc-status and grpc-message (percent-encoded); nil for OK.
func statusFrom(code, msg string) error {
	c, err := strconv.Atoi(code)
	if err != nil {
		return fmt.Errorf("ADS stream ended with an unreadable grpc-status %q", code)
	}
	if c == 0 {
		return nil
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return &grpcError{Code: c, Message: msg}
}

// codeName is a gRPC status code's name, as grpc-go prints it.
func codeName(c int) string {
	names := [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
		"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted",
		"OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}
	if c >= 0 && c < len(names) {
		return names[c]
	}
	return "Code(" + strconv.Itoa(c) + ")"
}
