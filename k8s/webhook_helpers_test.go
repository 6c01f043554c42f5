package k8s

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/stormgate/stormgate/k8s/cluster"
	"github.com/stormgate/stormgate/k8s/helmchart"
)

// chartDir is charts/stormgate, from this module's directory.
var chartDir = filepath.Join("..", "charts", "stormgate")

// renderChart is `helm template stormgate charts/stormgate -n stormgate-system` with values over the
// chart's defaults.
func renderChart(t *testing.T, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	m, err := helmchart.Template(chartDir, helmchart.Release, helmchart.Namespace, values)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return decodeObjects(t, m)
}

func findObject(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// webhook is `sidecar inject-webhook` running here with the arguments of the chart's Deployment
// (listen address and certificate files replaced by local ones), behind the chart's
// MutatingWebhookConfiguration rendered with its url.
type webhook struct {
	url, metrics string
	caPEM        []byte
	args         []string
	cmd          *exec.Cmd
	done         chan struct{}
	mu           sync.Mutex
	log          []string
}

// startWebhook runs the webhook process with the chart's arguments for values. Stopped at cleanup.
func startWebhook(t *testing.T, values map[string]any) *webhook {
	t.Helper()
	objs := renderChart(t, values)
	dep := findObject(objs, "Deployment", "stormgate-inject-webhook")
	if dep == nil {
		t.Fatal("the chart renders no webhook Deployment")
	}
	ctrs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	var args []string
	for _, a := range ctrs[0].(map[string]any)["args"].([]any) {
		args = append(args, a.(string))
	}
	ca, cert, key := servingCert(t, "webhook")
	local := map[string]string{"--listen": "127.0.0.1:0", "--cert": cert, "--key": key, "--metrics": "127.0.0.1:0"}
	for i := 0; i+1 < len(args); i++ {
		if v, ok := local[args[i]]; ok {
			args[i+1] = v
		}
	}
	w := &webhook{caPEM: ca.PEM, args: args, done: make(chan struct{})}
	w.cmd = exec.Command(sidecar, args...)
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	w.cmd.Stdout, w.cmd.Stderr = pw, pw
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = w.cmd.Wait(); pw.Close(); close(w.done) }()
	t.Cleanup(func() { w.stop(t) })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			w.log = append(w.log, line)
			w.mu.Unlock()
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			switch {
			case m["msg"] == "inject webhook serving":
				w.mu.Lock()
				w.url = "https://" + m["listen"].(string)
				w.mu.Unlock()
			case m["msg"] == "http listener started" && m["listener"] == "metrics":
				w.mu.Lock()
				w.metrics = "http://" + m["address"].(string)
				w.mu.Unlock()
			}
			w.mu.Lock()
			if w.url != "" && w.metrics != "" && ready != nil {
				close(ready)
				ready = nil
			}
			w.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case <-ready:
	case <-w.done:
		t.Fatalf("inject-webhook %v exited:\n%s", args, w.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("inject-webhook not serving after 30 s:\n%s", w.output())
	}
	return w
}

func (w *webhook) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.log, "\n")
}

// stop ends the process (SIGTERM) and waits for it.
func (w *webhook) stop(t *testing.T) {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
	if t.Failed() {
		t.Logf("inject-webhook log:\n%s", w.output())
	}
}

// reviews returns stormgate_webhook_reviews_total by result.
func (w *webhook) reviews(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get(w.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var result string
		var v float64
		if _, err := fmt.Sscanf(sc.Text(), "stormgate_webhook_reviews_total{result=%q} %g", &result, &v); err == nil {
			out[result] = v
		}
	}
	return out
}

// installWebhookConfiguration applies the chart's MutatingWebhookConfiguration rendered with values
// (plus webhook.url and webhook.caBundle naming w, and no certificates: tls.mode none), replacing the
// one there, and waits until the API server calls w for a dry-run pod in an opted-in namespace.
// Deleted at cleanup. A webhook that is not running (cmd nil) is not waited for.
func installWebhookConfiguration(t *testing.T, w *webhook, values map[string]any) *unstructured.Unstructured {
	t.Helper()
	values = merge(values, map[string]any{"webhook": map[string]any{"url": w.url, "caBundle": string(w.caPEM)}, "tls": map[string]any{"mode": "none"}})
	mwc := findObject(renderChart(t, values), "MutatingWebhookConfiguration", "stormgate-inject")
	if mwc == nil {
		t.Fatal("the chart renders no MutatingWebhookConfiguration")
	}
	ctx := context.Background()
	mwcs := kube.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if err := mwcs.Delete(ctx, mwc.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := applyObjects(ctx, []*unstructured.Unstructured{mwc}); err != nil {
		t.Fatalf("the chart's MutatingWebhookConfiguration: %v", err)
	}
	t.Cleanup(func() { _ = mwcs.Delete(context.Background(), mwc.GetName(), metav1.DeleteOptions{}) })
	if w.cmd != nil {
		waitWebhookActive(t)
	}
	return mwc
}

var probeNamespace struct {
	once sync.Once
	name string
}

// waitWebhookActive creates dry-run pods in an opted-in namespace until one comes back injected: the
// API server picks up a new configuration a moment after it is stored.
func waitWebhookActive(t *testing.T) {
	t.Helper()
	probeNamespace.once.Do(func() {
		probeNamespace.name = namespace(t, "probe", map[string]string{"stormgate.io/inject": "enabled"})
	})
	var last string
	if !poll(30*time.Second, func() bool {
		p, err := kube.Client.CoreV1().Pods(probeNamespace.name).Create(context.Background(), plainPod("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err.Error()
			return false
		}
		last = "not injected"
		return injected(p)
	}) {
		t.Fatalf("the webhook configuration is not in force after 30 s: %s", last)
	}
}

// plainPod is a provider pod written to Pod Security's restricted standard, so that what injection adds
// is the only thing a level can refuse.
func plainPod(name string) *corev1.Pod {
	no, yes := false, true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "order-provider"}},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "provider", Image: "registry.example/order-provider:1",
				Ports: []corev1.ContainerPort{{Name: "dubbo", ContainerPort: 20880}},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{
					Port: intOrString("dubbo")}}, PeriodSeconds: 10},
				SecurityContext: &corev1.SecurityContext{
					RunAsUser: ptr[int64](1000), AllowPrivilegeEscalation: &no,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}

// injected reports whether the pod holds Stormgate's container.
func injected(p *corev1.Pod) bool {
	return slices.ContainsFunc(slices.Concat(p.Spec.Containers, p.Spec.InitContainers), func(c corev1.Container) bool { return c.Name == "stormgate" })
}

func countContainers(p *corev1.Pod, name string) int {
	n := 0
	for _, c := range slices.Concat(p.Spec.Containers, p.Spec.InitContainers) {
		if c.Name == name {
			n++
		}
	}
	return n
}

// merge returns a copy of a with b's values over it, maps merged recursively.
func merge(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = merge(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

func ptr[T any](v T) *T { return &v }

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// servingCert makes a CA and a serving certificate for 127.0.0.1 signed by it: what a webhook's
// caBundle and --cert/--key are.
func servingCert(t *testing.T, name string) (ca *cluster.CA, certFile, keyFile string) {
	t.Helper()
	ca, err := cluster.NewCA(t.TempDir(), name+"-ca")
	if err != nil {
		t.Fatal(err)
	}
	if certFile, keyFile, err = ca.Serving(name, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	return ca, certFile, keyFile
}
