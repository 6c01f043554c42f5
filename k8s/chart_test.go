package k8s

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/stormgate/stormgate/k8s/helmchart"
)

// allSwitches turns on every optional part of the chart.
var allSwitches = map[string]any{
	"createNamespace": true,
	"monitoring":      map[string]any{"serviceMonitor": true, "prometheusRule": true, "grafanaDashboard": true},
}

// chartCases are the renderings the chart tests check: its defaults, deploy/'s values, each TLS mode
// with everything on, and the knobs the docs mention.
func chartCases(t *testing.T) map[string]map[string]any {
	deployValues, err := helmchart.ValuesFile(filepath.Join(chartDir, "ci", "deploy-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]map[string]any{
		"defaults":                 nil,
		"deploy values":            deployValues,
		"cert-manager, everything": merge(allSwitches, map[string]any{"tls": map[string]any{"clientNamespaces": []any{"shop", "finance"}}}),
		"self-signed, everything": merge(allSwitches, map[string]any{"tls": map[string]any{"mode": "self-signed", "clientNamespaces": []any{"shop"}},
			"webhook": map[string]any{"failurePolicy": "Fail", "denyOnError": false, "inject": map[string]any{"redirect": "none"}}}),
		"no certificates, one replica, no routing": merge(allSwitches, map[string]any{"tls": map[string]any{"mode": "none"},
			"controlPlane": map[string]any{"replicas": 1}, "webhook": map[string]any{"replicas": 1, "podSecurityRouting": false, "caBundle": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}}),
		"own issuer, image override": merge(allSwitches, map[string]any{"tls": map[string]any{"issuer": "corp-ca"},
			"image": map[string]any{"tag": "1.2.3"}, "webhook": map[string]any{"inject": map[string]any{"xds": false}}}),
	}
}

// TestChartLintsAndRenders is `helm lint --strict` and `helm template` (Helm's Go packages) over
// every case: no lint message at all, and a rendering that parses.
func TestChartLintsAndRenders(t *testing.T) {
	for name, values := range chartCases(t) {
		for _, m := range helmchart.Lint(chartDir, helmchart.Namespace, values) {
			if m.Severity > support.InfoSev { // what --strict fails on
				t.Errorf("%s: helm lint: %s", name, m)
			} else {
				t.Logf("%s: helm lint: %s", name, m)
			}
		}
		objs := renderChart(t, values)
		if len(objs) == 0 {
			t.Errorf("%s: renders nothing", name)
		}
		for _, o := range objs {
			if o.GetKind() == "" || o.GetName() == "" {
				t.Errorf("%s: object without kind or name: %v", name, o.Object)
			}
		}
	}
	// The self-signed bootstrap: the webhook's certificate chains to the caBundle the API server is
	// given, for the Service name it calls.
	objs := renderChart(t, chartCases(t)["self-signed, everything"])
	sec := findObject(objs, "Secret", "stormgate-inject-webhook-tls")
	mwc := findObject(objs, "MutatingWebhookConfiguration", "stormgate-inject")
	webhooks, _, _ := unstructured.NestedSlice(mwc.Object, "webhooks")
	for _, wh := range webhooks {
		bundle, _, _ := unstructured.NestedString(wh.(map[string]any), "clientConfig", "caBundle")
		crt, _, _ := unstructured.NestedString(sec.Object, "data", "tls.crt")
		if err := verifyChain(bundle, crt, "stormgate-inject-webhook."+helmchart.Namespace+".svc"); err != nil {
			t.Errorf("self-signed: webhook %v: %v", wh.(map[string]any)["name"], err)
		}
	}
	// The image tag is the chart's appVersion unless image.tag says otherwise.
	dep := findObject(renderChart(t, nil), "Deployment", "stormgate-control-plane")
	ctrs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if img := ctrs[0].(map[string]any)["image"]; img != "stormgate/control:"+chartAppVersion(t) {
		t.Errorf("control plane image %v, want stormgate/control:<appVersion %s>", img, chartAppVersion(t))
	}
}

func chartAppVersion(t *testing.T) string {
	ch, err := helmchart.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Metadata.AppVersion
}

// TestChartObjectsAccepted applies every case's objects to the API server (strict field validation):
// all are accepted. cert-manager's and prometheus-operator's kinds get stand-in CRDs (any spec:
// those projects' schemas are not checked here; the objects' shape is checked against them in
// build/deploy_test.go). The MutatingWebhookConfigurations that name the in-cluster Service are
// deleted at once: nothing here serves them. Then the ServiceAccounts are checked to have no access
// to the API: neither component needs any.
func TestChartObjectsAccepted(t *testing.T) {
	ctx := context.Background()
	if err := applyObjects(ctx, decodeObjects(t, standInCRDs)); err != nil {
		t.Fatal(err)
	}
	if !poll(30e9, func() bool {
		_, err := kube.Client.Discovery().ServerResourcesForGroupVersion("monitoring.coreos.com/v1")
		_, err2 := kube.Client.Discovery().ServerResourcesForGroupVersion("cert-manager.io/v1")
		return err == nil && err2 == nil
	}) {
		t.Fatal("stand-in CRDs not served after 30 s")
	}
	// helm install --create-namespace, cert-manager's namespace, the client certificates' namespaces.
	for _, ns := range []string{helmchart.Namespace, "cert-manager", "shop", "finance"} {
		_ = applyObjects(ctx, decodeObjects(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n"))
	}
	mwcs := kube.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cases := chartCases(t)
	for _, name := range slices.Sorted(maps.Keys(cases)) {
		objs := renderChart(t, cases[name])
		err := applyObjects(ctx, objs)
		_ = mwcs.Delete(ctx, "stormgate-inject", metav1.DeleteOptions{})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		kinds := map[string]int{}
		for _, o := range objs {
			kinds[o.GetKind()]++
		}
		t.Logf("%s: %d objects accepted %v", name, len(objs), kinds)
	}
	for _, sa := range []string{"stormgate-control-plane", "stormgate-inject-webhook"} {
		user := "system:serviceaccount:" + helmchart.Namespace + ":" + sa
		for _, attr := range []authorizationv1.ResourceAttributes{
			{Verb: "get", Resource: "pods", Namespace: "shop"}, {Verb: "list", Resource: "secrets", Namespace: helmchart.Namespace},
			{Verb: "get", Resource: "configmaps", Namespace: helmchart.Namespace},
		} {
			r, err := kube.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + helmchart.Namespace, "system:authenticated"}, ResourceAttributes: &attr}}, metav1.CreateOptions{})
			if err != nil || r.Status.Allowed {
				t.Errorf("%s may %s %s in %s (%v)", sa, attr.Verb, attr.Resource, attr.Namespace, err)
			}
		}
	}
}

// TestDeployIsTheChart: deploy/control-plane.yaml, inject-webhook.yaml and cert-manager.yaml are
// the chart rendered with ci/deploy-values.yaml (make deploy-manifests writes them).
func TestDeployIsTheChart(t *testing.T) {
	files, err := helmchart.Deploy(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("..", "deploy", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("deploy/%s is not the chart's rendering: run make deploy-manifests (and edit charts/stormgate, not deploy/)", name)
		}
	}
	// And they apply, as kubectl apply -f deploy/ would (cert-manager's kinds as stand-ins).
	var all strings.Builder
	for _, name := range []string{"control-plane.yaml", "inject-webhook.yaml", "cert-manager.yaml"} {
		fmt.Fprintf(&all, "%s\n---\n", files[name])
	}
	if err := applyObjects(context.Background(), decodeObjects(t, standInCRDs)); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"cert-manager", "shop"} {
		_ = applyObjects(context.Background(), decodeObjects(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n"))
	}
	poll(30e9, func() bool {
		_, err := kube.Client.Discovery().ServerResourcesForGroupVersion("cert-manager.io/v1")
		return err == nil
	})
	err = applyObjects(context.Background(), decodeObjects(t, all.String()))
	_ = kube.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), "stormgate-inject", metav1.DeleteOptions{})
	if err != nil {
		t.Errorf("kubectl apply -f deploy/: %v", err)
	}
}

// standInCRDs declare cert-manager's and prometheus-operator's kinds with an open schema, so that the
// chart's objects of those kinds can be applied (their own schemas are those projects').
var standInCRDs = crd("cert-manager.io", "Certificate", "certificates", "Namespaced") + crd("cert-manager.io", "ClusterIssuer", "clusterissuers", "Cluster") +
	crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors", "Namespaced") + crd("monitoring.coreos.com", "PodMonitor", "podmonitors", "Namespaced") +
	crd("monitoring.coreos.com", "PrometheusRule", "prometheusrules", "Namespaced")

func crd(group, kind, plural, scope string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[3]s.%[1]s
spec:
  group: %[1]s
  names: {kind: %[2]s, plural: %[3]s, singular: %[4]s}
  scope: %[5]s
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
`, group, kind, plural, strings.ToLower(kind), scope)
}

// verifyChain checks that the base64 PEM certificate crt is valid for dnsName under the base64 PEM CA.
func verifyChain(caB64, crtB64, dnsName string) error {
	caPEM, err := base64.StdEncoding.DecodeString(caB64)
	if err != nil {
		return fmt.Errorf("caBundle: %w", err)
	}
	crtPEM, err := base64.StdEncoding.DecodeString(crtB64)
	if err != nil {
		return fmt.Errorf("tls.crt: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("caBundle holds no certificate")
	}
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		return errors.New("tls.crt holds no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	_, err = cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName})
	return err
}
