package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/settings"
	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
)

func newValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE|DIR...",
		Short: "Check settings files (or control-plane files) before you ship them",
		Long: `Checks each FILE, and each DIR (its *.yaml / *.yml files, not hidden ones, not
recursively): YAML syntax, field names, types and, merged over the defaults,
every range. Every problem of a file is reported in one run (up to 50 per file),
one line each: a misspelt field does not hide a bad value further down. A control-plane file (top level default:, namespaces:, selectors:, nodes:)
or directory of them gets every check the control plane runs before publishing: each
entry's effective settings, no field a sidecar cannot change live, selectors that can
be ordered, and across the files of a directory: no namespace, selector or node id
defined twice (both files named). Prints "FILE: ok", or one line per problem naming the
field and its allowed range, and exits non-zero.`,
		Example: "  sidecar validate stormgate.yaml\n  sidecar validate examples/*.yaml\n  sidecar validate /etc/stormgate/control-plane.d/",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := validateTargets(args)
			if err != nil {
				return err
			}
			bad := 0
			for _, tg := range files {
				if !reportFile(cmd.OutOrStdout(), cmd.ErrOrStderr(), tg.path, tg.validate()) {
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

// target is one thing validate checks: a settings file, or a control-plane file or
// directory (checked as the control plane reads it, cross-file rules included).
type target struct {
	path         string
	controlPlane bool
}

func (tg target) validate() error {
	if tg.controlPlane {
		return cpfile.Validate(tg.path)
	}
	return settings.ValidateFile(tg.path)
}

// validateTargets expands each argument: a directory of control-plane files is one
// target; a directory of settings files is one target per file (settings.YAMLFiles).
func validateTargets(args []string) ([]target, error) {
	var out []target
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil || !fi.IsDir() {
			out = append(out, target{a, err == nil && cpfile.IsConfig(a)}) // ValidateFile reports a missing file
			continue
		}
		files, err := settings.YAMLFiles(a)
		if err != nil {
			return nil, err
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s: no *.yaml or *.yml files in this directory", a)
		}
		if slices.ContainsFunc(files, cpfile.IsConfig) {
			out = append(out, target{a, true})
			continue
		}
		for _, f := range files {
			out = append(out, target{f, false})
		}
	}
	return out, nil
}

// reportFile prints "FILE: ok" to out, or one line per problem to errOut;
// it reports whether the file is valid.
func reportFile(out, errOut io.Writer, path string, err error) bool {
	if err == nil {
		fmt.Fprintf(out, "%s: ok\n", path)
		for _, w := range fileWarnings(path) {
			fmt.Fprintf(errOut, "%s: warning: %s\n", path, w.Error())
		}
		return true
	}
	var ps settings.Problems
	if !errors.As(err, &ps) {
		fmt.Fprintf(errOut, "%s: %v\n", path, err)
		return false
	}
	for _, p := range ps {
		fmt.Fprintf(errOut, "%s: %s\n", path, p.Error())
	}
	return false
}

// validatePath checks one argument as the command does and returns the first
// target's problems (nil when every target is valid).
func validatePath(path string) error {
	tgs, err := validateTargets([]string{path})
	if err != nil {
		return err
	}
	for _, tg := range tgs {
		if err := tg.validate(); err != nil {
			return err
		}
	}
	return nil
}

// fileWarnings lists what is valid but probably a mistake in a settings file,
// merged over the defaults (none for a control-plane file or a directory).
func fileWarnings(path string) settings.Problems {
	if cpfile.IsConfig(path) {
		return nil
	}
	s, err := settings.LoadFile(path)
	if err != nil {
		return nil
	}
	return settings.Warnings(settings.WithDefaults(s))
}
