// Command stormbench is Stormgate's benchmark tool: a Dubbo 2 and Triple load generator (`stormbench load`),
// a test provider (`stormbench provider`), the integrity echo provider (`stormbench
// echo-provider`) and a control-plane fleet driver (`stormbench xds-fleet`), used by `make bench`,
// `make soak`, `make fleet` and by hand.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "stormbench",
		Short: "Dubbo 2 load generator and test provider for benchmarking Stormgate",
		Long: `stormbench measures Dubbo 2 servers (a provider, HAProxy, Stormgate) from the consumer side.

  stormbench load      open N consumer connections, heartbeat, send requests at a fixed rate,
                       and report every outcome with latency percentiles (JSON with --json)
  stormbench provider  run the project's test provider in its own process
  stormbench echo-provider  a provider that echoes raw bodies, reads badly and records
                       integrity violations (pair it with load --body-max); --protocol triple
                       for the h2c Triple/gRPC one (pair it with load --protocol triple)
  stormbench xds-fleet run N Stormgate xDS clients against the control plane and time pushes,
                       selector changes and a replica failover

Start here:
  stormbench provider --listen 127.0.0.1:20880 &
  stormbench load --target 127.0.0.1:20880 --conns 1000 --rate 5000 --duration 10s`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newLoadCmd(), newGreedyCmd(), newWorkerCmd(), newProviderCmd(), newEchoCmd(), newXDSFleetCmd(), newFleetWorkerCmd())
	return root
}
