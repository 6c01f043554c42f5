package xds

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
)

// h2cServer serves handler over plaintext HTTP/2 (prior knowledge), as a gRPC
// server does, and returns its address.
func h2cServer(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler, Protocols: p}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

// readRequest reads one gRPC-framed request message from a call's body.
func readRequest(r io.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

func openTest(t *testing.T, addr string) (*adsStream, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return openADS(ctx, addr, nil, time.Second, &adsRequest{TypeURL: ExtensionConfigType, ResourceNames: []string{"stormgate"}})
}

// The call as a gRPC server sees it: the path, the headers, the first request
// in the body from the start; messages both ways; the status from the trailers.
func TestADSStreamWire(t *testing.T) {
	got := make(chan []*discovery.DiscoveryRequest, 1)
	addr := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != adsPath || r.Header.Get("Content-Type") != "application/grpc" || r.Header.Get("Te") != "trailers" || r.ProtoMajor != 2 {
			t.Errorf("request %s %s %v proto %d", r.Method, r.URL.Path, r.Header, r.ProtoMajor)
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message")
		var reqs []*discovery.DiscoveryRequest
		for i := range 2 {
			b, err := readRequest(r.Body)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			var req discovery.DiscoveryRequest
			if err := proto.Unmarshal(b, &req); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
			reqs = append(reqs, &req)
			writeResponse(w, &discovery.DiscoveryResponse{VersionInfo: "v1", Nonce: strconv.Itoa(i)})
		}
		got <- reqs
		w.Header().Set("Grpc-Status", "14")
		w.Header().Set("Grpc-Message", "going away: 100%25 done")
	})
	st, err := openTest(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.Recv()
	if err != nil || r.VersionInfo != "v1" || r.Nonce != "0" {
		t.Fatalf("first response %+v %v", r, err)
	}
	if err := st.Send(&adsRequest{VersionInfo: "v1", ResponseNonce: "0"}); err != nil {
		t.Fatal(err)
	}
	if r, err = st.Recv(); err != nil || r.Nonce != "1" {
		t.Fatalf("second response %+v %v", r, err)
	}
	_, err = st.Recv()
	var ge *grpcError
	if !errors.As(err, &ge) || ge.Code != 14 || err.Error() != "Unavailable: going away: 100% done" {
		t.Fatalf("end of stream: %v", err)
	}
	reqs := <-got
	if len(reqs) != 2 || reqs[0].GetTypeUrl() != ExtensionConfigType || reqs[1].GetResponseNonce() != "0" {
		t.Fatalf("server read %v", reqs)
	}
}

func writeResponse(w http.ResponseWriter, r *discovery.DiscoveryResponse) {
	msg, _ := proto.Marshal(r)
	_, _ = w.Write(frame(msg))
	w.(http.Flusher).Flush()
}

// grpcBody answers as a gRPC server would start to, then writes body and ends the stream
// without trailers.
func grpcBody(body ...byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		if len(body) > 0 {
			_, _ = w.Write(body)
		}
	}
}

// What a client meets instead of a working stream, and what it says.
func TestADSStreamFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string // in the error of openADS or the first Recv
	}{
		{"trailers-only (no ADS service)", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Grpc-Status", "12")
			w.Header().Set("Grpc-Message", "unknown service envoy.service.discovery.v3.AggregatedDiscoveryService")
			w.WriteHeader(http.StatusOK)
		}, "Unimplemented: unknown service envoy.service.discovery.v3.AggregatedDiscoveryService"},
		{"not gRPC", func(w http.ResponseWriter, r *http.Request) {
			http.NotFound(w, r)
		}, "control plane answered HTTP 404, not a gRPC stream"},
		{"wrong content type", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "hello")
		}, `content-type "text/plain", not application/grpc`},
		{"compressed message", grpcBody(1, 0, 0, 0, 1, 0), "compressed message"},
		{"message over the limit", grpcBody(0, 0x7f, 0xff, 0xff, 0xff), "limit"},
		{"cut in a message", grpcBody(0, 0, 0, 0, 9, 0x0a), "unexpected EOF"},
		{"ended without a status", grpcBody(), "without a gRPC status"},
		{"malformed message", grpcBody(0, 0, 0, 0, 2, 0x0a, 0x05), "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := h2cServer(t, tc.handler)
			st, err := openTest(t, addr)
			if err == nil {
				defer st.Close()
				_, err = st.Recv()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// Cancelling the context ends a stream on which nothing arrives, both while it
// waits for its first response and in Recv: the transport is blocked reading the
// request body then, and only ending that body ends the call (a client that hung
// here could never be stopped or moved to another control plane).
func TestADSStreamCancel(t *testing.T) {
	opened := make(chan struct{}, 2)
	addr := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		writeResponse(w, &discovery.DiscoveryResponse{VersionInfo: "v1"})
		opened <- struct{}{}
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	st, err := openADS(ctx, addr, nil, time.Second, &adsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	<-opened
	done := make(chan error, 1)
	go func() { _, err := st.Recv(); done <- err }()
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Recv after cancel: no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Recv still blocked 10 s after the context was cancelled")
	}
}

// A process that accepts the connection and never speaks costs the connect
// timeout, not the first-response timeout, and the error says what happened.
func TestADSStreamSilentServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err = openADS(context.Background(), lis.Addr().String(), nil, 200*time.Millisecond, &adsRequest{})
	if err == nil || !strings.Contains(err.Error(), "sent nothing within 200ms") {
		t.Fatalf("error %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}
