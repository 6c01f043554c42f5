package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, Go version and key dependency versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, d := range bi.Deps {
					switch d.Path {
					case "github.com/cloudwego/netpoll", "github.com/envoyproxy/go-control-plane", "go.uber.org/zap",
						"github.com/prometheus/client_golang":
						fmt.Fprintf(cmd.OutOrStdout(), "  %s %s\n", d.Path, d.Version)
					}
				}
			}
			return nil
		},
	}
}

// versionLine is the first line of `sidecar version` and all of `sidecar --version`.
func versionLine() string {
	return fmt.Sprintf("stormgate %s (%s %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
