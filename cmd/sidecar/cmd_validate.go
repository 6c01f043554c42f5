package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/xds"
)

func newValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE|DIR...",
		Short: "Check settings files (or control-plane files) before you ship them",
		Long: `Checks each FILE, and every *.yaml / *.yml file in each DIR (not hidden ones, not
recursively): YAML syntax, field names, types and, merged over the defaults, every
range. A control-plane file (top level "default:" / "nodes:") is checked for its
default and for every node.

Every problem of a file is reported in one run (up to 50 per file), one line each,
naming the field, what is wrong, the allowed range and the line: a misspelt field
does not hide a bad value further down. Prints "FILE: ok" for a good file; exits
non-zero when any file has a problem.`,
		Example: "  sidecar validate stormgate.yaml\n  sidecar validate examples/*.yaml\n  sidecar validate /etc/stormgate/",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := validateTargets(args)
			if err != nil {
				return err
			}
			bad := 0
			for _, path := range files {
				if !reportFile(cmd.OutOrStdout(), cmd.ErrOrStderr(), path, xds.ValidateFile(path)) {
					bad++
				}
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d files invalid", bad, len(files))
			}
			return nil
		},
	}
}

// validateTargets expands each DIR argument into its settings files
// (xds.YAMLFiles); FILE arguments stay as given.
func validateTargets(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil || !fi.IsDir() {
			files = append(files, a) // ValidateFile reports a missing file
			continue
		}
		in, err := xds.YAMLFiles(a)
		if err != nil {
			return nil, err
		}
		if len(in) == 0 {
			return nil, fmt.Errorf("%s: no *.yaml or *.yml files in this directory", a)
		}
		files = append(files, in...)
	}
	return files, nil
}

// reportFile prints "FILE: ok" to out, or one line per problem to errOut;
// it reports whether the file is valid.
func reportFile(out, errOut io.Writer, path string, err error) bool {
	if err == nil {
		fmt.Fprintf(out, "%s: ok\n", path)
		return true
	}
	var ps xds.Problems
	if !errors.As(err, &ps) {
		fmt.Fprintf(errOut, "%s: %v\n", path, err)
		return false
	}
	for _, p := range ps {
		fmt.Fprintf(errOut, "%s: %s\n", path, p.Error())
	}
	return false
}
