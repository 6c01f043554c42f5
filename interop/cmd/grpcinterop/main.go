// Command grpcinterop runs grpc-go's interoperability test peers (google.golang.org/grpc/interop, grpc-go
// v1.52.0: the version dubbo-go v3.3.0's go.mod selects in this module) as separate processes, so Stormgate's
// interop tests can put a proxy between them.
//
//	grpcinterop server --port P [--log-requests FILE]
//	    Serves grpc.testing.TestService (interop.NewTestServer) on 127.0.0.1:P over h2c and prints "READY P"
//	    once it listens. SIGTERM stops it gracefully (GracefulStop: GOAWAY, then it waits for the calls it
//	    has, and exits once they are answered), SIGINT at once. --log-requests appends "UnaryCall <tag>" to
//	    FILE, in one write, before each unary call runs (<tag> is the call's x-grpc-test-echo-initial).
//	grpcinterop loop --addr HOST:PORT --duration D [--workers N] [--interval I] [--hold]
//	    N callers make unary calls (UnaryCall) for D, each tagged "w<worker>-<n>" in x-grpc-test-echo-initial,
//	    which the server echoes in its response head: a call is ok only with its own tag back. Prints one JSON
//	    summary line (dgconsumer's loop summary) when done; with --hold it keeps its connection open until
//	    its stdin closes (so a test can check no connection was closed before that).
//	grpcinterop client --addr HOST:PORT --test_cases a,b,c
//	    Runs the named test cases in order against the server at --addr (h2c, no TLS) and prints "PASS <case>"
//	    after each. A failing case ends the process with status 1 and the reason on stderr (grpc-go's interop
//	    checks call its logger's Fatal), as grpc-go's own interop client does.
//
// Test cases: empty_unary, large_unary, client_streaming, server_streaming, ping_pong, empty_stream,
// cancel_after_begin, cancel_after_first_response, timeout_on_sleeping_server, custom_metadata,
// status_code_and_message, special_status_message, unimplemented_method. "all" runs every one of them.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// cases maps a test case name to its grpc-go interop check.
var cases = []struct {
	name string
	run  func(tc testgrpc.TestServiceClient, cc *grpc.ClientConn)
}{
	{"empty_unary", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoEmptyUnaryCall(tc) }},
	{"large_unary", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoLargeUnaryCall(tc) }},
	{"client_streaming", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoClientStreaming(tc) }},
	{"server_streaming", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoServerStreaming(tc) }},
	{"ping_pong", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoPingPong(tc) }},
	{"empty_stream", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoEmptyStream(tc) }},
	{"cancel_after_begin", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoCancelAfterBegin(tc) }},
	{"cancel_after_first_response", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) {
		interop.DoCancelAfterFirstResponse(tc)
	}},
	{"timeout_on_sleeping_server", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) {
		interop.DoTimeoutOnSleepingServer(tc)
	}},
	{"custom_metadata", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) { interop.DoCustomMetadata(tc) }},
	{"status_code_and_message", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) {
		interop.DoStatusCodeAndMessage(tc)
	}},
	{"special_status_message", func(tc testgrpc.TestServiceClient, _ *grpc.ClientConn) {
		interop.DoSpecialStatusMessage(tc)
	}},
	{"unimplemented_method", func(_ testgrpc.TestServiceClient, cc *grpc.ClientConn) { interop.DoUnimplementedMethod(cc) }},
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "server":
		fs := flag.NewFlagSet("server", flag.ExitOnError)
		port := fs.Int("port", 0, "TCP port on 127.0.0.1")
		logRequests := fs.String("log-requests", "", "append \"UnaryCall <tag>\" to this file before each unary call runs")
		_ = fs.Parse(os.Args[2:])
		serve(*port, *logRequests)
	case "loop":
		fs := flag.NewFlagSet("loop", flag.ExitOnError)
		addr := fs.String("addr", "", "HOST:PORT of the server (or of a proxy in front of it)")
		duration := fs.Duration("duration", 10*time.Second, "how long to call")
		workers := fs.Int("workers", 1, "concurrent callers")
		interval := fs.Duration("interval", 0, "pause between one caller's calls")
		hold := fs.Bool("hold", false, "after the summary, keep the connection open until stdin closes")
		_ = fs.Parse(os.Args[2:])
		if *addr == "" || *workers < 1 || *duration <= 0 {
			usage()
		}
		runLoop(*addr, *duration, *interval, *workers, *hold)
	case "client":
		fs := flag.NewFlagSet("client", flag.ExitOnError)
		addr := fs.String("addr", "", "HOST:PORT of the server (or of a proxy in front of it)")
		list := fs.String("test_cases", "all", "comma-separated test cases, or all")
		_ = fs.Parse(os.Args[2:])
		if *addr == "" {
			usage()
		}
		runClient(*addr, *list)
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: grpcinterop server --port P [--log-requests FILE] | client --addr HOST:PORT "+
		"[--test_cases a,b|all] | loop --addr HOST:PORT --duration D [--workers N] [--interval I]")
	os.Exit(2)
}

func serve(port int, logRequests string) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "grpcinterop: %v\n", err)
		os.Exit(1)
	}
	var opts []grpc.ServerOption
	if logRequests != "" {
		f, err := os.OpenFile(logRequests, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "grpcinterop: --log-requests: %v\n", err)
			os.Exit(1)
		}
		opts = append(opts, grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo,
			h grpc.UnaryHandler) (any, error) {
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				if tags := md.Get(echoInitial); len(tags) > 0 {
					_, _ = f.WriteString("UnaryCall " + tags[0] + "\n") // one write(2) on an O_APPEND file
				}
			}
			return h(ctx, req)
		}))
	}
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	stopped := make(chan struct{})
	go func() {
		if s := <-sig; s == syscall.SIGTERM {
			srv.GracefulStop()
		} else {
			srv.Stop()
		}
		close(stopped)
	}()
	fmt.Printf("READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintf(os.Stderr, "grpcinterop: serve: %v\n", err)
		os.Exit(1)
	}
	<-stopped // Serve returns when the listener closes; GracefulStop returns once the calls it had are answered
}

// echoInitial is the request header grpc-go's interop server echoes in its response head.
const echoInitial = "x-grpc-test-echo-initial"

// loopSummary is what loop prints: dgconsumer's loop summary, so the tests read both alike.
type loopSummary struct {
	Mode       string      `json:"mode"`
	Addr       string      `json:"addr"`
	Sent       int         `json:"sent"`
	OK         int         `json:"ok"`
	Errors     int         `json:"errors"`
	Timeouts   int         `json:"timeouts"`
	Mismatches int         `json:"mismatches"`
	Elapsed    string      `json:"elapsed"`
	Failures   []callError `json:"failures,omitempty"`
	FailedArgs []string    `json:"failed_args,omitempty"`
}

type callError struct {
	At     string `json:"at"`
	AtNano int64  `json:"at_ns"`
	Err    string `json:"err"`
}

// dial connects to addr over h2c, or exits.
func dial(addr string) *grpc.ClientConn {
	cc, err := grpc.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "grpcinterop: dial %s: %v\n", addr, err)
		os.Exit(1)
	}
	return cc
}

// runLoop makes tagged unary calls with workers callers for duration and prints the summary.
func runLoop(addr string, duration, interval time.Duration, workers int, hold bool) {
	cc := dial(addr)
	defer cc.Close()
	tc := testgrpc.NewTestServiceClient(cc)
	start := time.Now()
	var (
		mu sync.Mutex
		s  = loopSummary{Mode: "loop", Addr: addr}
		wg sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Since(start) < duration; n++ {
				tag := fmt.Sprintf("w%d-%d", w, n)
				t := time.Now()
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), echoInitial, tag),
					5*time.Second)
				var head metadata.MD
				_, err := tc.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 16}, grpc.Header(&head))
				cancel()
				mu.Lock()
				s.Sent++
				switch got := head.Get(echoInitial); {
				case err != nil:
					if status.Code(err) == codes.DeadlineExceeded {
						s.Timeouts++
					} else {
						s.Errors++
					}
					s.Failures = append(s.Failures, callError{At: t.Sub(start).Round(time.Millisecond).String(),
						AtNano: t.UnixNano(), Err: err.Error()})
					s.FailedArgs = append(s.FailedArgs, tag)
				case len(got) != 1 || got[0] != tag:
					s.Mismatches++
				default:
					s.OK++
				}
				mu.Unlock()
				time.Sleep(interval)
			}
		}()
	}
	wg.Wait()
	s.Elapsed = time.Since(start).Round(time.Millisecond).String()
	b, _ := json.Marshal(s)
	fmt.Println(string(b))
	if hold {
		_, _ = io.Copy(io.Discard, os.Stdin)
	}
}

func runClient(addr, list string) {
	cc := dial(addr)
	defer cc.Close()
	tc := testgrpc.NewTestServiceClient(cc)
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		want[strings.TrimSpace(n)] = true
	}
	ran := 0
	for _, c := range cases {
		if !want["all"] && !want[c.name] {
			continue
		}
		c.run(tc, cc)
		fmt.Printf("PASS %s\n", c.name)
		ran++
	}
	if ran == 0 {
		fmt.Fprintf(os.Stderr, "grpcinterop: no known test case in %q\n", list)
		os.Exit(2)
	}
}
