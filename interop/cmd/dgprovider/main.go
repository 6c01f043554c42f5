// Command dgprovider is a real dubbo-go v3.3.0 provider (dubbo protocol, hessian2) used as the provider-side peer
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
//   - SayHello(name) returns "Hello, " + name: the request `make bench` forwards to measure proxy CPU per
//     request (bench/suite's forward scenario calls it as sayHello, the Java spelling; dubbo-go finds both).
//
// The process runs until SIGINT or SIGTERM; the tests usually end it with SIGKILL.
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
func (*Greeter) Echo(_ context.Context, s string) (string, error) { return s, nil }

// Fail always returns a business error that carries its argument.
func (*Greeter) Fail(_ context.Context, s string) (string, error) {
	return "", errors.New("business failure: " + s)
}

// Big returns its argument; it exists so large frames have a method of their own in traces.
func (*Greeter) Big(_ context.Context, s string) (string, error) { return s, nil }

// SayHello greets name, the hello-world method of the Dubbo samples.
func (*Greeter) SayHello(_ context.Context, name string) (string, error) {
	return "Hello, " + name, nil
}

// Sleep sleeps for the duration d (Go syntax, e.g. "100ms"), then returns d.
func (*Greeter) Sleep(ctx context.Context, d string) (string, error) {
	dur, err := time.ParseDuration(d)
	if err != nil {
		return "", fmt.Errorf("bad duration %q: %w", d, err)
	}
	if dur > maxSleep {
		dur = maxSleep
	}
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return d, nil
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
	flag.Parse()
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
	// A nil ServiceInfo panics in v3.3.0; dubbo-go still discovers the methods by reflection.
	if err := srv.Register(&Greeter{}, &common.ServiceInfo{InterfaceName: Interface},
		server.WithInterface(Interface)); err != nil {
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
			} else if ok && exported(Interface) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
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

// exported reports whether the dubbo protocol has an exporter for iface (no group, no version).
func exported(iface string) bool {
	p, ok := dubbo.GetProtocol().(interface{ ExporterMap() *sync.Map })
	if !ok {
		return false
	}
	_, found := p.ExporterMap().Load(iface)
	return found
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
