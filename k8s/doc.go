// Package k8s tests Stormgate against a real Kubernetes control plane: kube-apiserver v1.34.2 and
// etcd v3.6.4, built from their Go modules (this separate module pins them, so the main module never
// depends on k8s.io/kubernetes or Helm) and started on loopback by package cluster. The tests run
// `sidecar inject-webhook` (built from the main module) as a local process behind a
// MutatingWebhookConfiguration with a url and caBundle, create Pods, Deployments and StatefulSets
// through client-go, and read back what the API server stored: its schema validation, defaulting,
// Pod Security admission, RBAC and webhook machinery (selectors, failurePolicy, reinvocation) are the
// real ones. The chart (charts/stormgate) is rendered and linted with Helm's Go packages and its
// objects are applied to the same API server. There is no kubelet, scheduler or controller manager:
// nothing runs; a workload's pods are created from its template as its controller would create them.
//
// Run it with `make k8s-test` (k8s/run.sh), which builds kube-apiserver, etcd and the sidecar first.
// Concurrency: TestMain owns the cluster; tests run one at a time, each in namespaces of its own.
package k8s
