// Command dgconsumer is a real dubbo-go v3.3.0 consumer (dubbo protocol, hessian2, no retries) used as the
// consumer-side peer in Stormgate's interop tests. It calls org.stormgate.Greeter at --addr.
//
// --protocol triple calls over Triple instead (h2c, hessian2, no IDL): registry-less through
// client.DialWithInfo with the method names listed, as dubbo-go v3.3.0 needs for non-IDL Triple (its Triple
// client makes one HTTP/2 client per listed method; plain client.Dial lists none, so every call fails with
// "missing triple client for method"; --dial plain shows it). dubbo-go's Triple client shares one h2c
// connection per provider address and PINGs it after 10 s without frames (ReadIdleTimeout).
//
//	dgconsumer [flags] once [--min-conns N] [--hold]
//	    Echo, Fail (expects the business error), Big (50 KB round trip), Sleep("100ms") and 200 concurrent Echo
//	    calls, each result checked. Prints one JSON summary line; exits 1 on any mismatch.
//	    --min-conns N: first wait until this process holds N established connections to --addr (dubbo-go's
//	    getty client opens its 16 connections one by one, with pauses growing 0.3 s, 0.6 s, ... up to 3 s: all
//	    16 exist about 30 s after Dial).
//	    --hold: after printing the summary, keep the connections open until stdin reaches EOF.
//	dgconsumer [flags] loop --duration 8s --interval 10ms [--workers 1] [--method Echo|Hold] [--hold-for D] [--ticks] [--hold]
//	    Echo in a loop for the duration; counts ok, errors and timeouts. Every call's argument is unique
//	    ("w<worker>-<n>"; with --method Hold "<D>/w<worker>-<n>": the provider keeps it D before answering), and
//	    the summary lists the arguments of the failed calls. Prints one JSON summary line; exits 1
//	    if any call failed. --ticks prints "TICK <n> <start unix ns> <latency ns> ok|err" on stdout after each
//	    call, so a test can act between calls. --hold as for once.
//
// --group and --version call Greeter in a Dubbo group and as a service version.
//
// Exit status 2 means bad usage or a setup failure.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"dubbo.apache.org/dubbo-go/v3/client"
	_ "dubbo.apache.org/dubbo-go/v3/protocol/triple"
	_ "github.com/stormgate/stormgate/interop/internal/dubboext"

	"github.com/stormgate/stormgate/interop/internal/peerlog"
	"github.com/stormgate/stormgate/interop/internal/sockets"
)

// Interface is the Dubbo interface (service path) the consumer calls.
const Interface = "org.stormgate.Greeter"

// bigSize is the Big argument size: 50 KB, well under dubbo-go's 102,400-byte frame limit.
const bigSize = 50 * 1024

// concurrentCalls is how many Echo calls "once" runs at the same time.
const concurrentCalls = 200

// maxRecorded bounds how many error messages a summary carries.
const maxRecorded = 100

// CallError is one failed call in a summary.
type CallError struct {
	At     string `json:"at"`    // offset from the start of the run
	AtNano int64  `json:"at_ns"` // when the call began, Unix nanoseconds (to line it up with another process's events)
	Method string `json:"method"`
	Err    string `json:"err"`
}

// Check is the outcome of one "once" step.
type Check struct {
	Name    string `json:"name"`
	OK      bool   `json:"ok"`
	Detail  string `json:"detail,omitempty"`
	Elapsed string `json:"elapsed"`
}

// OnceSummary is what "once" prints.
type OnceSummary struct {
	Mode      string  `json:"mode"`
	Addr      string  `json:"addr"`
	OK        bool    `json:"ok"`
	Conns     int     `json:"conns,omitempty"`      // own connections to Addr seen before calling (--min-conns)
	ConnsWait string  `json:"conns_wait,omitempty"` // how long reaching --min-conns took
	Checks    []Check `json:"checks"`
	Elapsed   string  `json:"elapsed"`
}

// LoopSummary is what "loop" prints.
type LoopSummary struct {
	Mode       string      `json:"mode"`
	Addr       string      `json:"addr"`
	Sent       int         `json:"sent"`
	OK         int         `json:"ok"`
	Errors     int         `json:"errors"`   // failed calls that are not timeouts
	Timeouts   int         `json:"timeouts"` // calls that hit the request timeout
	Mismatches int         `json:"mismatches"`
	MaxLatency string      `json:"max_latency"`
	P50        string      `json:"p50"`
	P99        string      `json:"p99"`
	Elapsed    string      `json:"elapsed"`
	Failures   []CallError `json:"failures,omitempty"`    // first maxRecorded failures
	FailedArgs []string    `json:"failed_args,omitempty"` // the argument of every failed call (errors and timeouts)
	FailedErrs []string    `json:"failed_errs,omitempty"` // their errors, in the same order
	Mismatched []Mismatch  `json:"mismatched,omitempty"`  // first maxRecorded calls answered with another value
}

// Mismatch is one call answered without an error but with a value other than its argument.
type Mismatch struct {
	At     string `json:"at"`    // offset from the start of the run
	AtNano int64  `json:"at_ns"` // when the call began, Unix nanoseconds
	Arg    string `json:"arg"`
	Got    string `json:"got"` // "" for a null answer
}

func main() {
	addr := flag.String("addr", "127.0.0.1:20881", "HOST:PORT to call (a provider or Stormgate)")
	timeout := flag.Duration("timeout", 3*time.Second, "per-request timeout")
	proto := flag.String("protocol", "dubbo", "dubbo: the Dubbo 2 protocol; triple: Triple (h2c, gRPC-compatible), hessian2, no IDL")
	dialMode := flag.String("dial", "info", "triple only: info (client.DialWithInfo with the method names) or plain (client.Dial)")
	logLevel := flag.String("log-level", "warn", "dubbo-go log level (debug, info, warn, error)")
	group := flag.String("group", "", "call Greeter in this Dubbo group")
	version := flag.String("version", "", "call this service version of Greeter")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: dgconsumer [--addr HOST:PORT] [--timeout D] once|loop [loop flags]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := peerlog.Setup(*logLevel); err != nil {
		fmt.Fprintf(os.Stderr, "dgconsumer: %v\n", err)
		os.Exit(2)
	}

	if *proto != "dubbo" && *proto != "triple" {
		fmt.Fprintln(os.Stderr, "dgconsumer: --protocol must be dubbo or triple")
		os.Exit(2)
	}
	conn, err := dial(*proto, *dialMode, *addr, *timeout, client.WithGroup(*group), client.WithVersion(*version))
	if err != nil {
		fmt.Fprintf(os.Stderr, "dgconsumer: %v\n", err)
		os.Exit(2)
	}
	c := &caller{conn: conn, timeout: *timeout}

	var ok bool
	switch mode, args := flag.Arg(0), flag.Args()[1:]; mode {
	case "once":
		fs := flag.NewFlagSet("once", flag.ExitOnError)
		minConns := fs.Int("min-conns", 0, "wait until this process holds N connections to --addr before calling")
		minConnsTimeout := fs.Duration("min-conns-timeout", 60*time.Second, "give up waiting for --min-conns")
		hold := fs.Bool("hold", false, "after the summary, keep connections open until stdin reaches EOF")
		_ = fs.Parse(args)
		var s OnceSummary
		if *minConns > 0 {
			n, waited, err := waitOwnConns(*addr, *minConns, *minConnsTimeout)
			s.Conns, s.ConnsWait = n, waited.Round(time.Millisecond).String()
			if err != nil {
				fmt.Fprintf(os.Stderr, "dgconsumer: %v\n", err)
				os.Exit(2)
			}
		}
		c.once(&s, *addr)
		ok = s.OK
		emit(s)
		if *hold {
			_, _ = io.Copy(io.Discard, os.Stdin)
		}
	case "loop":
		fs := flag.NewFlagSet("loop", flag.ExitOnError)
		duration := fs.Duration("duration", 8*time.Second, "how long to call")
		interval := fs.Duration("interval", 10*time.Millisecond, "pause between a worker's calls")
		workers := fs.Int("workers", 1, "concurrent callers")
		ticks := fs.Bool("ticks", false, "print a TICK line on stdout after each call")
		hold := fs.Bool("hold", false, "after the summary, keep connections open until stdin reaches EOF")
		method := fs.String("method", "Echo", "Echo, or Hold: the provider keeps each call --hold-for before answering")
		holdFor := fs.Duration("hold-for", 20*time.Millisecond, "with --method Hold, how long the provider keeps each call")
		_ = fs.Parse(args)
		if *workers < 1 || *duration <= 0 || *interval < 0 || (*method != "Echo" && *method != "Hold") {
			fmt.Fprintln(os.Stderr, "dgconsumer: loop needs --workers >= 1, --duration > 0, --interval >= 0, --method Echo or Hold")
			os.Exit(2)
		}
		prefix := ""
		if *method == "Hold" {
			prefix = holdFor.String() + "/"
		}
		s := c.loop(*addr, *duration, *interval, *workers, *ticks, *method, prefix)
		ok = s.Errors == 0 && s.Timeouts == 0 && s.Mismatches == 0
		emit(s)
		if *hold {
			_, _ = io.Copy(io.Discard, os.Stdin)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// Methods are Greeter's methods, which a non-IDL Triple client must be told.
var Methods = []string{"Echo", "Fail", "Big", "Sleep", "Error", "Hold", "SayHello"}

// dial builds a direct (registry-less) dubbo-go client for Interface at addr. dubbo-go's Dial panics when nothing
// listens at addr; that panic becomes an error here.
func dial(proto, dialMode, addr string, timeout time.Duration, opts ...client.ReferenceOption) (conn *client.Connection, err error) {
	protoOpt, scheme := client.WithClientProtocolDubbo(), "dubbo://"
	if proto == "triple" {
		protoOpt, scheme = client.WithClientProtocolTriple(), "tri://"
	}
	cli, err := client.NewClient(
		protoOpt,
		client.WithClientSerialization("hessian2"),
		client.WithClientRequestTimeout(timeout),
		client.WithClientRetries(0),
	)
	if err != nil {
		return nil, fmt.Errorf("new client: %w", err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("dial %s: panic: %v", addr, r)
		}
	}()
	if proto == "triple" && dialMode == "info" {
		conn, err = cli.DialWithInfo(Interface, &client.ClientInfo{InterfaceName: Interface, MethodNames: Methods},
			append([]client.ReferenceOption{client.WithURL(scheme + addr)}, opts...)...)
	} else {
		conn, err = cli.Dial(Interface, append([]client.ReferenceOption{client.WithURL(scheme + addr)}, opts...)...)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return conn, nil
}

type caller struct {
	conn    *client.Connection
	timeout time.Duration
}

// call invokes method(arg) and returns the string result.
func (c *caller) call(method, arg string) (string, error) {
	// The context deadline is a backstop; dubbo-go enforces the request timeout itself.
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout+time.Second)
	defer cancel()
	var resp string
	err := c.conn.CallUnary(ctx, []interface{}{arg}, &resp, method, client.WithCallRequestTimeout(c.timeout))
	return resp, err
}

func (c *caller) once(s *OnceSummary, addr string) {
	start := time.Now()
	s.Mode, s.Addr, s.OK = "once", addr, true
	check := func(name string, f func() error) {
		t := time.Now()
		err := f()
		ch := Check{Name: name, OK: err == nil, Elapsed: time.Since(t).String()}
		if err != nil {
			ch.Detail = err.Error()
			s.OK = false
		}
		s.Checks = append(s.Checks, ch)
	}

	check("echo", func() error {
		got, err := c.call("Echo", "hello stormgate")
		if err != nil {
			return err
		}
		if got != "hello stormgate" {
			return fmt.Errorf("got %q", got)
		}
		return nil
	})
	check("business_error", func() error {
		got, err := c.call("Fail", "boom-42")
		if err == nil {
			return fmt.Errorf("no error, got %q", got)
		}
		if !strings.Contains(err.Error(), "business failure: boom-42") {
			return fmt.Errorf("wrong error: %v", err)
		}
		return nil
	})
	check("big_50KB", func() error {
		arg := bigString(bigSize)
		got, err := c.call("Big", arg)
		if err != nil {
			return err
		}
		if got != arg {
			return fmt.Errorf("got %d bytes, want %d identical bytes", len(got), len(arg))
		}
		return nil
	})
	check("sleep_100ms", func() error {
		t := time.Now()
		got, err := c.call("Sleep", "100ms")
		if err != nil {
			return err
		}
		if got != "100ms" {
			return fmt.Errorf("got %q", got)
		}
		if el := time.Since(t); el < 100*time.Millisecond {
			return fmt.Errorf("returned after %v, before the 100ms sleep", el)
		}
		return nil
	})
	check("concurrent_200", func() error {
		var wg sync.WaitGroup
		errs := make([]error, concurrentCalls)
		for i := range concurrentCalls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				want := fmt.Sprintf("call-%03d", i)
				got, err := c.call("Echo", want)
				switch {
				case err != nil:
					errs[i] = err
				case got != want:
					errs[i] = fmt.Errorf("call %d: got %q want %q", i, got, want)
				}
			}()
		}
		wg.Wait()
		var failed []error
		for _, err := range errs {
			if err != nil {
				failed = append(failed, err)
			}
		}
		if len(failed) > 0 {
			return fmt.Errorf("%d of %d failed, first: %w", len(failed), concurrentCalls, failed[0])
		}
		return nil
	})
	s.Elapsed = time.Since(start).String()
}

// waitOwnConns polls until this process holds want established connections to addr, and returns how many it
// saw last and how long it waited.
func waitOwnConns(addr string, want int, timeout time.Duration) (int, time.Duration, error) {
	remote, err := netip.ParseAddrPort(addr)
	if err != nil {
		return 0, 0, fmt.Errorf("--min-conns needs --addr as IP:PORT: %w", err)
	}
	start := time.Now()
	for {
		n, err := sockets.CountOwnTo(remote)
		if err != nil {
			return 0, time.Since(start), err
		}
		if n >= want {
			return n, time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return n, time.Since(start), fmt.Errorf("%d connections to %s after %v, want %d", n, addr, timeout, want)
		}
		time.Sleep(250 * time.Millisecond) // the kernel tables can be large on a busy host; poll gently

	}
}

func (c *caller) loop(addr string, duration, interval time.Duration, workers int, ticks bool, method, prefix string) LoopSummary {
	start := time.Now()
	deadline := start.Add(duration)
	var (
		mu        sync.Mutex
		s         = LoopSummary{Mode: "loop", Addr: addr}
		latencies []time.Duration
		wg        sync.WaitGroup
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; time.Now().Before(deadline); n++ {
				want := fmt.Sprintf("%sw%d-%d", prefix, w, n)
				t := time.Now()
				got, err := c.call(method, want)
				lat := time.Since(t)
				mu.Lock()
				s.Sent++
				latencies = append(latencies, lat)
				switch {
				case err != nil:
					if isTimeout(err) {
						s.Timeouts++
					} else {
						s.Errors++
					}
					if len(s.Failures) < maxRecorded {
						s.Failures = append(s.Failures, CallError{
							At: t.Sub(start).Round(time.Millisecond).String(), AtNano: t.UnixNano(), Method: method,
							Err: oneLine(err)})
					}
					s.FailedArgs = append(s.FailedArgs, want)
					s.FailedErrs = append(s.FailedErrs, oneLine(err))
				case got != want:
					s.Mismatches++
					if len(s.Mismatched) < maxRecorded {
						s.Mismatched = append(s.Mismatched, Mismatch{At: t.Sub(start).Round(time.Millisecond).String(),
							AtNano: t.UnixNano(), Arg: want, Got: got})
					}
				default:
					s.OK++
				}
				if ticks {
					res := "ok"
					if err != nil || got != want {
						res = "err"
					}
					fmt.Printf("TICK %d %d %d %s\n", s.Sent, t.UnixNano(), lat.Nanoseconds(), res)
				}
				mu.Unlock()
				if interval > 0 {
					time.Sleep(interval)
				}
			}
		}()
	}
	wg.Wait()
	s.Elapsed = time.Since(start).Round(time.Millisecond).String()
	if len(latencies) > 0 {
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		s.P50 = latencies[len(latencies)/2].String()
		s.P99 = latencies[len(latencies)*99/100].String()
		s.MaxLatency = latencies[len(latencies)-1].String()
	}
	return s
}

// isTimeout reports whether err is a request timeout. dubbo-go's getty client returns an unexported error whose
// message says "timeout" (errClientReadTimeout), so the message is all there is to match.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(strings.ToLower(err.Error()), "timeout")
}

// oneLine returns err's message without the stack dubbo-go attaches (pkg/errors), first line only.
func oneLine(err error) string {
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// bigString returns n bytes of printable ASCII with a position-dependent pattern, so truncation or reordering
// would show.
func bigString(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[(i*7+i/len(alphabet))%len(alphabet)]
	}
	return string(b)
}

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dgconsumer: %v\n", err)
		os.Exit(2)
	}
	fmt.Println(string(b))
}
