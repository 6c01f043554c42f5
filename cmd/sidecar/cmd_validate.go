package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/xds"
)

func newValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check settings files (or control-plane files) before you ship them",
		Long: `Checks each FILE: YAML syntax, field names, types and, merged over the defaults,
every range. A control-plane file (top level default:, namespaces:, selectors:, nodes:)
or directory of them gets every check the control plane runs before publishing: each
entry's effective settings, no field a sidecar cannot change live, selectors that can
be ordered, and across the files of a directory: no namespace, selector or node id
defined twice (both files named). Prints "FILE: ok", or one line per problem naming the
field and its allowed range, and exits non-zero.`,
		Example: "  sidecar validate stormgate.yaml\n  sidecar validate examples/*.yaml\n  sidecar validate /etc/stormgate/control-plane.d/",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			bad := 0
			for _, path := range args {
				err := validatePath(path)
				if err == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", path)
					continue
				}
				bad++
				var ps xds.Problems
				if !errors.As(err, &ps) {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %v\n", path, err)
					continue
				}
				for _, p := range ps {
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", path, p.Error())
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d files invalid", bad, len(args))
			}
			return nil
		},
	}
}

// validatePath checks a sidecar settings file, or a control-plane file or
// directory the way the control plane does before publishing.
func validatePath(path string) error {
	if xds.IsControlPlaneConfig(path) {
		return xds.ValidateControlPlane(path)
	}
	return xds.ValidateFile(path)
}
