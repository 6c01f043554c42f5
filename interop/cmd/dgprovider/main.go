// Command dgprovider is a real dubbo-go v3.3.0 provider (dubbo protocol, hessian2; or, with --protocol triple,
// Triple, dubbo-go's gRPC-compatible HTTP/2 protocol, with hessian2 and no IDL) used as the provider-side peer
// in Stormgate's interop tests. It serves the interface org.stormgate.Greeter on --port (all interfaces, as
// dubbo-go binds them) and prints exactly one line "READY <port>" on stdout once it listens on the port. It exits
// 1 at once if the port is taken.
//
// Methods (each takes and returns one string):
//   - Echo(s) returns s.
//   - Fail(s) returns a business error whose message contains s (a dubbo-go provider sends it as a status-20
//     response carrying an exception).
//   - Big(s) returns s; the tests call it with a 50 KB argument (dubbo-go's frame limit is 102,400 bytes).
//   - Sleep(d) sleeps for the Go duration d (capped at one minute), then returns d.
//   - Error(s) returns a business error whose message is exactly s (a look-alike of dubbo-go's own
//     "don't have this exporter" answer when s is that text).
//   - Hold(s) takes "<duration>/<tag>", sleeps the duration (capped at one minute) and returns s: a call
//     that is inside the provider for a while, with a tag of the caller's choosing.
//   - SayHello(name) returns "Hello, " + name: the request `make bench` forwards to measure proxy CPU per
//     request (bench/suite's forward scenario calls it as sayHello, the Java spelling; dubbo-go finds both).
//
// --group and --version serve Greeter in a Dubbo group and as a service version (a consumer must name the same).
//
// --log-requests FILE appends one line "<method> <arg>" to FILE for every Echo, Error and Hold call, with
// one write(2) before the method does anything else, so the file survives SIGKILL and tells a test which
// calls this process ran. With --protocol triple every call is logged ("Big <n> bytes" for Big).
//
// --protocol triple serves the same methods over Triple (h2c with prior knowledge, one HTTP/2 stream per call,
// :path /org.stormgate.Greeter/<Method>, content-type application/grpc+hessian2). Each method is registered
// by name (dubbo-go v3.3.0's non-IDL mode needs a ServiceInfo listing them; it adds the lower-case
// spellings Java callers use).
//
// SIGTERM runs dubbo-go's own graceful shutdown, as in a user's provider (graceful_shutdown.Init, which
// server.NewServer calls, installs the handler): the process keeps serving for the consumer-update wait
// (3 s) and the provider-step wait (up to 3 s, until no request arrived for 3 s), then rejects, unexports,
// closes its server and exits 0. With --cpuprofile the process instead stops at once on SIGTERM so the
// profile is written. SIGINT stops it at once; the tests usually end it with SIGKILL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"dubbo.apache.org/dubbo-go/v3/common"
	"dubbo.apache.org/dubbo-go/v3/common/constant"
	"dubbo.apache.org/dubbo-go/v3/common/extension"
	"dubbo.apache.org/dubbo-go/v3/config"
	"dubbo.apache.org/dubbo-go/v3/global"
	"dubbo.apache.org/dubbo-go/v3/protocol"
	"dubbo.apache.org/dubbo-go/v3/protocol/dubbo"
	"dubbo.apache.org/dubbo-go/v3/protocol/triple"
	"dubbo.apache.org/dubbo-go/v3/server"
	_ "github.com/stormgate/stormgate/interop/internal/dubboext"

	"github.com/stormgate/stormgate/interop/internal/peerlog"
	"github.com/stormgate/stormgate/interop/internal/sockets"
)

// Interface is the Dubbo interface (service path) the provider exports.
const Interface = "org.stormgate.Greeter"

// maxSleep caps Sleep so a bad argument cannot park a provider goroutine for long.
const maxSleep = time.Minute

// Greeter implements org.stormgate.Greeter. dubbo-go finds its methods by reflection: exported, an optional
// context first, error last.
type Greeter struct{}

// Echo returns its argument.
func (*Greeter) Echo(_ context.Context, s string) (string, error) {
	logRequest("Echo", s)
	return s, nil
}

// Fail always returns a business error that carries its argument.
func (*Greeter) Fail(_ context.Context, s string) (string, error) {
	logAll("Fail", s)
	return "", errors.New("business failure: " + s)
}

// Big returns its argument; it exists so large frames have a method of their own in traces.
func (*Greeter) Big(_ context.Context, s string) (string, error) {
	logAll("Big", strconv.Itoa(len(s))+" bytes")
	return s, nil
}

// SayHello greets name, the hello-world method of the Dubbo samples.
func (*Greeter) SayHello(_ context.Context, name string) (string, error) {
	logAll("SayHello", name)
	return "Hello, " + name, nil
}

// Sleep sleeps for the duration d (Go syntax, e.g. "100ms"), then returns d.
func (*Greeter) Sleep(ctx context.Context, d string) (string, error) {
	logAll("Sleep", d)
	dur, err := time.ParseDuration(d)
	if err != nil {
		return "", fmt.Errorf("bad duration %q: %w", d, err)
	}
	sleep(ctx, dur)
	return d, nil
}

// Error returns a business error whose message is exactly s.
func (*Greeter) Error(_ context.Context, s string) (string, error) {
	logRequest("Error", s)
	return "", errors.New(s)
}

// Hold takes "<duration>/<tag>", sleeps the duration and returns its argument.
func (*Greeter) Hold(ctx context.Context, s string) (string, error) {
	logRequest("Hold", s)
	d, _, ok := strings.Cut(s, "/")
	dur, err := time.ParseDuration(d)
	if !ok || err != nil {
		return "", fmt.Errorf("Hold wants <duration>/<tag>, got %q", s)
	}
	sleep(ctx, dur)
	return s, nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(min(d, maxSleep))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// requestLog is --log-requests: nil when off. Each line goes out in one write(2) on an O_APPEND file, so
// it is in the kernel (and survives SIGKILL) before the method does anything else.
var requestLog *os.File

func logRequest(method, arg string) {
	if requestLog != nil {
		_, _ = requestLog.Write([]byte(method + " " + arg + "\n"))
	}
}

// logAllCalls is --protocol triple: every method logs its call, not only Echo, Error and Hold (whose log the
// dubbo-protocol tests read as it always was).
var logAllCalls bool

func logAll(method, arg string) {
	if logAllCalls {
		logRequest(method, arg)
	}
}

func main() {
	port := flag.Int("port", 20880, "TCP port to serve the dubbo protocol on (all interfaces)")
	sessions := flag.Int("session-number", 0,
		"getty session-number: max connections served (0 keeps dubbo-go's default of 700)")
	logLevel := flag.String("log-level", "warn", "dubbo-go log level (debug, info, warn, error)")
	metadataSvc := flag.String("metadata-service", "same-port",
		"same-port: dubbo-go's default, MetadataService is exported first on --port, so the port accepts (and answers "+
			"\"don't have this exporter\") before Greeter is exported; off: no MetadataService (metadata type "+
			"remote), the port opens with Greeter already exported")
	exportDelay := flag.Duration("export-delay", 0,
		"hold Greeter's export back this long (a dubbo-go config post-processor): with --metadata-service "+
			"same-port the port then answers \"don't have this exporter\" for Greeter that long after it opens")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile to this file until SIGINT/SIGTERM")
	logRequests := flag.String("log-requests", "",
		"append \"<method> <arg>\" to this file for every Echo, Error and Hold call (every call with --protocol "+
			"triple), before running it")
	proto := flag.String("protocol", "dubbo", "dubbo: the Dubbo 2 protocol; triple: Triple (h2c, gRPC-compatible), hessian2, no IDL")
	group := flag.String("group", "", "serve Greeter in this Dubbo group")
	version := flag.String("version", "", "serve Greeter as this service version")
	flag.Parse()
	if *proto != "dubbo" && *proto != "triple" {
		fmt.Fprintln(os.Stderr, "dgprovider: --protocol must be dubbo or triple")
		os.Exit(2)
	}
	logAllCalls = *proto == "triple"
	if *port <= 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "dgprovider: --port must be 1..65535")
		os.Exit(2)
	}
	if err := peerlog.Setup(*logLevel); err != nil {
		fmt.Fprintf(os.Stderr, "dgprovider: %v\n", err)
		os.Exit(2)
	}

	if *sessions > 0 {
		// dubbo-go reads getty's server settings from the root config's protocol params when the server starts.
		// TLSConfig must be nil or getty switches TLS on.
		rc := config.GetRootConfig()
		rc.TLSConfig = nil
		rc.Protocols = map[string]*config.ProtocolConfig{
			"dubbo": {Name: "dubbo", Params: map[string]interface{}{"session-number": *sessions}},
		}
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fatal("cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal("cpuprofile: %v", err)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	if *logRequests != "" {
		f, err := os.OpenFile(*logRequests, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			fatal("log-requests: %v", err)
		}
		requestLog = f
	}

	if *exportDelay > 0 {
		extension.SetConfigPostProcessor("stormgate-export-delay", exportDelayer{iface: Interface, delay: *exportDelay})
	}

	// Fail fast on a taken port: dubbo-go would log the bind error and keep running.
	if ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(*port))); err != nil {
		fatal("port %d: %v", *port, err)
	} else {
		ln.Close()
	}

	srvOpts := []server.ServerOption{server.WithServerProtocol(protocol.WithDubbo(), protocol.WithPort(*port))}
	if *proto == "triple" {
		srvOpts = []server.ServerOption{server.WithServerProtocol(protocol.WithTriple(), protocol.WithPort(*port))}
	}
	switch *metadataSvc {
	case "same-port":
	case "off":
		srvOpts = append(srvOpts, server.SetServerApplication(&global.ApplicationConfig{MetadataType: constant.RemoteMetadataStorageType}))
	default:
		fatal("--metadata-service must be same-port or off")
	}
	srv, err := server.NewServer(srvOpts...)
	if err != nil {
		fatal("new server: %v", err)
	}
	// A nil ServiceInfo panics in v3.3.0; dubbo-go still discovers the methods by reflection (dubbo protocol).
	// Triple registers one HTTP handler per method listed in the ServiceInfo, so there they are listed.
	info := &common.ServiceInfo{InterfaceName: Interface}
	svcOpts := []server.ServiceOption{server.WithInterface(Interface), server.WithGroup(*group), server.WithVersion(*version)}
	if *proto == "triple" {
		info = tripleInfo(&Greeter{})
		svcOpts = append(svcOpts, server.WithSerialization(constant.Hessian2Serialization))
	}
	if err := srv.Register(&Greeter{}, info, svcOpts...); err != nil {
		fatal("register: %v", err)
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve() }() // Serve blocks forever on success; it has no stop.

	// READY means Greeter is served: this process listens on the port (dubbo-go logs a failed listen and carries
	// on serving nothing; a dial could reach another process) and Greeter is in the dubbo protocol's exporter
	// map, which is what a request is looked up in (the port may open earlier, for the MetadataService).
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		for {
			if ok, err := sockets.OwnListening(uint16(*port)); err != nil {
				fatal("%v", err)
			} else if ok && exported(*proto, common.ServiceKey(Interface, *group, *version)) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	// SIGTERM belongs to dubbo-go's graceful shutdown (see the package doc), unless a profile must be written.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT)
	if *cpuProfile != "" {
		signal.Notify(sig, syscall.SIGTERM)
	}
	startTimeout := time.NewTimer(20 * time.Second)
	defer startTimeout.Stop()
	select {
	case <-ready:
		fmt.Printf("READY %d\n", *port)
	case err := <-serveErr:
		fatal("serve: %v", err)
	case <-startTimeout.C:
		fatal("not listening on port %d after 20s (see the log above)", *port)
	case <-sig:
		return
	}
	select {
	case err := <-serveErr:
		fatal("serve: %v", err)
	case <-sig:
	}
}

// exported reports whether the protocol (dubbo or triple) has an exporter for the service key.
func exported(proto, serviceKey string) bool {
	pr := dubbo.GetProtocol()
	if proto == "triple" {
		pr = triple.GetProtocol()
	}
	p, ok := pr.(interface{ ExporterMap() *sync.Map })
	if !ok {
		return false
	}
	_, found := p.ExporterMap().Load(serviceKey)
	return found
}

// tripleInfo lists Greeter's methods for dubbo-go's non-IDL Triple mode: each unary, one string argument
// (hessian2), answered by calling the method.
func tripleInfo(g *Greeter) *common.ServiceInfo {
	methods := map[string]func(context.Context, string) (string, error){
		"Echo": g.Echo, "Fail": g.Fail, "Big": g.Big, "SayHello": g.SayHello, "Sleep": g.Sleep, "Error": g.Error,
		"Hold": g.Hold,
	}
	info := &common.ServiceInfo{InterfaceName: Interface}
	for name, fn := range methods {
		info.Methods = append(info.Methods, common.MethodInfo{
			Name:        name,
			Type:        constant.CallUnary,
			ReqInitFunc: func() interface{} { return []interface{}{new(string)} },
			MethodFunc: func(ctx context.Context, args []interface{}, _ interface{}) (interface{}, error) {
				if len(args) != 1 {
					return nil, fmt.Errorf("%s takes one string argument, got %d", name, len(args))
				}
				s, ok := args[0].(string)
				if !ok {
					return nil, fmt.Errorf("%s takes a string, got %T", name, args[0])
				}
				return fn(ctx, s)
			},
		})
	}
	return info
}

// exportDelayer is a dubbo-go ConfigPostProcessor; dubbo-go calls PostProcessServiceConfig for each service just
// before exporting it, so sleeping there delays that export.
type exportDelayer struct {
	iface string
	delay time.Duration
}

func (exportDelayer) PostProcessReferenceConfig(*common.URL) {}

func (d exportDelayer) PostProcessServiceConfig(u *common.URL) {
	if u.GetParam(constant.InterfaceKey, "") == d.iface {
		time.Sleep(d.delay)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "dgprovider: "+format+"\n", args...)
	os.Exit(1)
}
