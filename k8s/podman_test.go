package k8s

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoredPodRunsInPodman is issue 29's acceptance 3: the existing pod test (e2e/pod,
// TestInjectedPodInPodman: real containers under `podman kube play`, consumers over IPv4 and IPv6,
// mTLS to a control plane, probes, capabilities) on the pod the API server stored after the chart's
// webhook injected it, instead of on `sidecar inject`'s output. kube-inject (cmd/kube-inject) creates
// the test's Deployment and its pod through this cluster and hands the stored pod back to the pod
// test. Podman is required: k8s/run.sh and .ci/run install it; without it this test fails, saying so.
func TestStoredPodRunsInPodman(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: the pod test runs the stored pod under podman kube play (Debian: apt-get install podman buildah runc netavark catatonit; .ci/run installs them)")
	}
	if os.Getuid() != 0 {
		t.Fatal("the pod test needs root (it creates a podman network and enters the pod's network namespace)")
	}
	w := startWebhook(t, nil)
	installWebhookConfiguration(t, w, nil)

	bin := filepath.Join(t.TempDir(), "kube-inject")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/kube-inject").CombinedOutput(); err != nil {
		t.Fatalf("build kube-inject: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(context.Background(), "go", "test", "-count=1", "-v", "-timeout", "10m", "-run", "^TestInjectedPodInPodman$", "./e2e/pod/")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "STORMGATE_POD_INJECT="+bin, "STORMGATE_KUBECONFIG="+kube.Kubeconfig, "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestInjectedPodInPodman") {
		t.Fatalf("the pod test on the stored pod: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "injected by the API server's webhook") {
		t.Fatalf("the pod test did not use the stored pod:\n%s", out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "kube-inject") || strings.Contains(line, "pod ready") || strings.HasPrefix(strings.TrimSpace(line), "--- ") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
