// Command grpcinterop runs grpc-go's interoperability test peers (google.golang.org/grpc/interop, grpc-go
// v1.52.0: the version dubbo-go v3.3.0's go.mod selects in this module) as separate processes, so Stormgate's
// interop tests can put a proxy between them.
//
//	grpcinterop server --port P
//	    Serves grpc.testing.TestService (interop.NewTestServer) on 127.0.0.1:P over h2c and prints "READY P"
//	    once it listens. SIGTERM stops it gracefully (GracefulStop), SIGINT at once.
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
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
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
		_ = fs.Parse(os.Args[2:])
		serve(*port)
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
	fmt.Fprintln(os.Stderr, "usage: grpcinterop server --port P | client --addr HOST:PORT [--test_cases a,b|all]")
	os.Exit(2)
}

func serve(port int) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "grpcinterop: %v\n", err)
		os.Exit(1)
	}
	srv := grpc.NewServer()
	testgrpc.RegisterTestServiceServer(srv, interop.NewTestServer())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if s := <-sig; s == syscall.SIGTERM {
			srv.GracefulStop()
		} else {
			srv.Stop()
		}
	}()
	fmt.Printf("READY %d\n", ln.Addr().(*net.TCPAddr).Port)
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintf(os.Stderr, "grpcinterop: serve: %v\n", err)
		os.Exit(1)
	}
}

func runClient(addr, list string) {
	cc, err := grpc.Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintf(os.Stderr, "grpcinterop: dial %s: %v\n", addr, err)
		os.Exit(1)
	}
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
