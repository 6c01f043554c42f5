// Command render-deploy writes deploy/control-plane.yaml, deploy/inject-webhook.yaml and
// deploy/cert-manager.yaml from charts/stormgate (make deploy-manifests runs it from the repository's
// root). TestDeployIsTheChart fails when they differ from what it would write.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/stormgate/stormgate/k8s/helmchart"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	flag.Parse()
	files, err := helmchart.Deploy(filepath.Join(*root, "charts", "stormgate"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "render-deploy:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		path := filepath.Join(*root, "deploy", n)
		if err := os.WriteFile(path, files[n], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "render-deploy:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}
