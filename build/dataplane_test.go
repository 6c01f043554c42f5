package build

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyForDataplane are packages that only the control commands need: the Kubernetes API types
// (inject, inject-webhook), go-control-plane's server and snapshot cache and the grpc-go server
// under them (control-plane), and envoy's generated types, which the xDS client does without
// (xds/adswire.go). The data-plane build, which every injected pod runs, must not link them: with
// grpc-go and envoy's types it was 20.7 MB, without them 15.6 MB.
var heavyForDataplane = []string{
	"k8s.io/api/",
	"k8s.io/apimachinery/",
	"sigs.k8s.io/",
	"github.com/envoyproxy/go-control-plane/pkg/server/",
	"github.com/envoyproxy/go-control-plane/pkg/cache/",
	"github.com/envoyproxy/go-control-plane/envoy/",
	"google.golang.org/grpc",
	"google.golang.org/genproto/",
	"github.com/stormgate/stormgate/inject", // exactly (inject/appprobe serves the sidecar)
	"github.com/stormgate/stormgate/inject/webhook",
}

func deps(t *testing.T, tags ...string) []string {
	t.Helper()
	args := []string{"list", "-deps"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/sidecar")...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// TestDataplaneBuildLeavesOutControlPackages: -tags dataplane drops what heavyForDataplane lists,
// and the full build still has each of them (so the list, and this test, mean something).
func TestDataplaneBuildLeavesOutControlPackages(t *testing.T) {
	// An entry ending in / names a tree, any other one package.
	has := func(pkgs []string, prefix string) string {
		for _, p := range pkgs {
			if p == prefix || strings.HasSuffix(prefix, "/") && strings.HasPrefix(p, prefix) {
				return p
			}
		}
		return ""
	}
	full, dp := deps(t), deps(t, "dataplane")
	for _, prefix := range heavyForDataplane {
		if p := has(dp, prefix); p != "" {
			t.Errorf("the data-plane build links %s", p)
		}
		if has(full, prefix) == "" {
			t.Errorf("the full build links nothing under %s: update heavyForDataplane", prefix)
		}
	}
	t.Logf("packages linked: full build %d, data-plane build %d", len(full), len(dp))
}
