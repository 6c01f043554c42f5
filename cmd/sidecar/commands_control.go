//go:build !dataplane

package main

import "github.com/spf13/cobra"

// controlCommands are the commands that serve or change a fleet rather than one provider's
// traffic. They are left out of the data-plane build (-tags dataplane), which the
// stormgate/sidecar image holds: an injected pod never runs them, and without them the
// binary carries no Kubernetes API types and no xDS server (commands_dataplane.go).
func controlCommands() []*cobra.Command {
	return []*cobra.Command{newControlPlaneCmd(), newInjectCmd(), newInjectWebhookCmd()}
}

// dataplaneOnly reports whether this is the data-plane build.
const dataplaneOnly = false
