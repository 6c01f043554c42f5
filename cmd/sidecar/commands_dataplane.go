//go:build dataplane

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// controlCommands, in the data-plane build, are placeholders that say where the real
// commands are, so that `sidecar control-plane` in the sidecar image fails with
// directions rather than cobra's "unknown command".
func controlCommands() []*cobra.Command {
	var cmds []*cobra.Command
	for _, name := range []string{"control-plane", "inject", "inject-webhook"} {
		cmds = append(cmds, &cobra.Command{
			Use:                name,
			Short:              "not in this build: use the stormgate/control image or the release binary",
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return fmt.Errorf("sidecar %s is not in this build: this is the data-plane build (the stormgate/sidecar image: run, iptables, upgrade, validate, version, demo); "+
					"run %s from the stormgate/control image or the release binary (make build: bin/sidecar)", name, name)
			},
		})
	}
	return cmds
}

// dataplaneOnly reports whether this is the data-plane build.
const dataplaneOnly = true
