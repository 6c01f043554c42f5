package k8s

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stormgate/stormgate/k8s/cluster"
)

// The cluster every test uses, and the sidecar binary (STORMGATE_SIDECAR, built by k8s/run.sh from
// the main module).
var (
	kube    *cluster.Cluster
	sidecar string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	bins, err := cluster.BinariesFromEnv()
	if err == nil {
		sidecar = os.Getenv("STORMGATE_SIDECAR")
		if sidecar == "" {
			err = fmt.Errorf("STORMGATE_SIDECAR is not set: run the Kubernetes tests with `make k8s-test`")
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s tests:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "stormgate-k8s-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	start := time.Now()
	kube, err = cluster.Start(context.Background(), bins, dir, 3*time.Minute)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s tests: starting the cluster:", err)
		return 1
	}
	fmt.Printf("k8s tests: kube-apiserver ready at %s after %v (logs in %s)\n", kube.URL, time.Since(start).Round(time.Millisecond), dir)
	code := m.Run()
	kube.Stop()
	if code == 0 && os.Getenv("STORMGATE_K8S_KEEP") == "" {
		os.RemoveAll(dir)
	}
	return code
}
