// Command sidecar is the Stormgate binary: a Dubbo 2 sidecar proxy and its tools.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func main() {
	version = moduleVersion(version, debug.ReadBuildInfo)
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "sidecar",
		Short: "Stormgate: a sidecar proxy that shields Dubbo providers from heartbeat, connection and restart storms",
		Long: `Stormgate sits in front of one Dubbo 2 provider. It terminates every consumer connection,
answers consumer heartbeats itself, multiplexes requests onto a few upstream connections,
holds requests while the provider restarts, and paces connection storms.

Start here:
  sidecar demo                       see it work in 15 seconds, nothing else needed
  sidecar run --upstream 127.0.0.1:20880 --listen 0.0.0.0:20881
  sidecar validate stormgate.yaml    check a settings file before you ship it`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version, // --version, as most CLIs have it; `sidecar version` also lists dependencies
	}
	root.SetVersionTemplate(versionLine() + "\n")
	root.AddCommand(
		newRunCmd(),
		newDemoCmd(),
		newVersionCmd(),
		newValidateCmd(),
		newIptablesCmd(),
		newUpgradeCmd(),
	)
	root.AddCommand(controlCommands()...)
	return root
}
