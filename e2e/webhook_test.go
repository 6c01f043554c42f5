package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/e2e/testcerts"
	"github.com/stormgate/stormgate/internal/promscrape"
)

// Issue 13: `sidecar inject-webhook` as a process, wired as deploy/inject-webhook.yaml runs it: it
// serves AdmissionReview v1 over TLS with the certificate files it was given, injects with its flags
// (image, upstream connections), and counts what it did on its plain metrics listener. Without --cert
// it refuses to start, saying why.
func TestInjectWebhookProcess(t *testing.T) {
	out, err := exec.Command(bins.sidecar, "inject-webhook", "--listen", "127.0.0.1:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--cert and --key are required") {
		t.Fatalf("inject-webhook without certificates: %v\n%s", err, out)
	}
	out, err = exec.Command(bins.sidecar, "inject-webhook", "--cert", "x", "--key", "y", "--upstream-conns", "100").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "upstream.connections") {
		t.Fatalf("inject-webhook with --upstream-conns 100: %v\n%s", err, out)
	}

	dir := t.TempDir()
	ca := testcerts.NewCA(t, dir, "webhook-ca")
	cert, key := ca.Server(t, dir, "webhook", "127.0.0.1")
	p := startProc(t, "inject-webhook", bins.sidecar, "inject-webhook", "--listen", "127.0.0.1:0", "--cert", cert, "--key", key,
		"--metrics", "127.0.0.1:0", "--image", "registry.example/stormgate/sidecar:e2e", "--upstream-conns", "6")
	m := p.waitJSONLine(t, false, 20*time.Second, `"inject webhook serving"`, func(m map[string]any) bool { return m["msg"] == "inject webhook serving" })
	addr, _ := m["listen"].(string)
	m = p.waitJSONLine(t, false, 10*time.Second, `metrics "http listener started"`, func(m map[string]any) bool {
		return m["msg"] == "http listener started" && m["listener"] == "metrics"
	})
	metricsAddr, _ := m["address"].(string)

	pem, err := os.ReadFile(ca.Path)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"e2e-1",` +
		`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},` +
		`"namespace":"shop","operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"generateName":"p-"},` +
		`"spec":{"containers":[{"name":"app","image":"app:1","ports":[{"containerPort":20880}]}]}}}}`
	resp, err := client.Post("https://"+addr+"/inject", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		Response struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Patch   []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s: %v", resp.StatusCode, body, err)
	}
	if got.Response.UID != "e2e-1" || !got.Response.Allowed {
		t.Fatalf("response %s", body)
	}
	for _, want := range []string{`"registry.example/stormgate/sidecar:e2e"`, `"--upstream-conns","6"`, `"path":"/spec/initContainers"`} {
		if !bytes.Contains(got.Response.Patch, []byte(want)) {
			t.Errorf("patch lacks %s:\n%s", want, got.Response.Patch)
		}
	}
	ms, err := promscrape.Get(context.Background(), nil, metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	if v := ms.Sum("stormgate_webhook_reviews_total", `result="injected"`); v != 1 {
		t.Errorf("stormgate_webhook_reviews_total{result=injected} = %v, want 1", v)
	}
}
