// Command mklicenses writes the license texts of every module in Stormgate's shipped builds
// (package build/licenses) to one file, and fails when any of them cannot ship under Apache-2.0.
// `make release` runs it: dist/THIRD_PARTY_LICENSES.txt.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/stormgate/stormgate/build/licenses"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mklicenses:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("mklicenses", flag.ContinueOnError)
	out := fs.String("out", "", "file to write the license texts to (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("--out is required")
	}
	inv, err := licenses.Take(".")
	if err != nil {
		return err
	}
	if ps := inv.Problems(); len(ps) > 0 {
		return errors.New("modules that cannot ship:\n  " + strings.Join(ps, "\n  "))
	}
	return os.WriteFile(*out, []byte(inv.Texts()), 0o644)
}
