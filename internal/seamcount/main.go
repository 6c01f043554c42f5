// Command seamcount counts how a protocol's files in a package reach into the rest of it: every use, in
// the files whose names begin with a prefix, of an unexported identifier declared in the package's other
// files (a package-level name, or a field or method through a selector). It is design §14.6's measure of
// how far a protocol is from moving to a package of its own, since another package sees only exported
// names. It measured step 5b for HTTP/2 (h2*.go, 539 uses, then 55, then 1), which is package
// proxy/triple now, where the compiler holds the line; it is kept for the next move (step 5b c, the
// Dubbo session and pool), with the prefix of the files that move.
//
//	go run ./internal/seamcount [-prefix h2] [-v] ./proxy
//
// With -v it lists the identifiers, with how often and in which files; without, it prints the totals.
// Test files are left out.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	prefix := flag.String("prefix", "h2", "the protocol's files: names beginning with this")
	verbose := flag.Bool("v", false, "list every identifier")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: seamcount [-prefix h2] [-v] <package directory>")
		os.Exit(2)
	}
	uses, err := count(flag.Arg(0), *prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, "seamcount:", err)
		os.Exit(1)
	}
	total := 0
	for _, u := range uses {
		total += u.n
		if *verbose {
			fmt.Printf("%4d %-50s %s\n", u.n, u.name, u.files)
		}
	}
	fmt.Printf("%d uses of %d unexported identifiers\n", total, len(uses))
}
