package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=..." (make stamps what
// build/version.sh prints: docs/operations.md, "Versions and releases"). Without it, "dev".
var version = "dev"

// moduleVersion is the version to report: the stamped one, or for an unstamped build installed
// as a module at a release (`go install github.com/stormgate/stormgate/cmd/sidecar@v1.2.3`) the
// module's version without its "v"; else "dev". The pseudo-versions Go stamps on builds between
// tags (v0.0.0-20261202091200-7cea8b2abcde+dirty) are not releases and stay "dev".
func moduleVersion(stamped string, read func() (*debug.BuildInfo, bool)) string {
	if stamped != "dev" {
		return stamped
	}
	if bi, ok := read(); ok && releaseTag.MatchString(bi.Main.Version) && !pseudoVersion.MatchString(bi.Main.Version) {
		return strings.TrimPrefix(bi.Main.Version, "v")
	}
	return stamped
}

var (
	releaseTag    = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	pseudoVersion = regexp.MustCompile(`[0-9]{14}-[0-9a-f]{12}$`)
)

func newVersionCmd() *cobra.Command {
	var admin string
	cmd := &cobra.Command{
		Use:   "version [--admin 127.0.0.1:15000]",
		Short: "Print the version, Go version and key dependency versions (with --admin: of the running sidecar)",
		Long: `Print this binary's version, Go version and key dependency versions.

With --admin, ask the running sidecar on that admin listener instead (GET /version):
after 'sidecar upgrade' the binary on disk and the one serving may differ.`,
		Example: `  sidecar version
  kubectl exec -n shop orders-7d9f -c stormgate -- /sidecar version --admin 127.0.0.1:15000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if admin != "" {
				hc := &http.Client{Timeout: 5 * time.Second}
				resp, err := hc.Get("http://" + admin + "/version")
				if err != nil {
					return fmt.Errorf("no sidecar answers on --admin %s: %w", admin, err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("GET /version on %s: %s", admin, resp.Status)
				}
				fmt.Fprint(cmd.OutOrStdout(), "running: "+string(b))
				return nil
			}
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
	cmd.Flags().StringVar(&admin, "admin", "", "admin listener of a running sidecar to ask, e.g. 127.0.0.1:15000")
	return cmd
}

// versionLine is the first line of `sidecar version` and all of `sidecar --version`.
func versionLine() string {
	build := ""
	if dataplaneOnly {
		build = ", data-plane build" // the stormgate/sidecar image's: no control-plane, inject, inject-webhook
	}
	return fmt.Sprintf("stormgate %s (%s %s/%s%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH, build)
}

// versionHandler serves GET /version on the admin listener: the running binary's version
// line (after an upgrade, the new one's) and its PID.
func versionHandler(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "use GET /version", http.StatusMethodNotAllowed)
		return
	}
	fmt.Fprintf(w, "%s pid %d\n", versionLine(), os.Getpid())
}
