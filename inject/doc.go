// Package inject adds Stormgate to Kubernetes workloads: given Deployment, StatefulSet and Pod manifests
// (YAML, one or several documents), it adds to each pod template an init container that installs the
// inbound REDIRECT rules (`sidecar iptables`, CAP_NET_ADMIN only, run as root because iptables needs it)
// and the Stormgate container (`sidecar run --transparent`, non-root, read-only root filesystem, probes on
// /healthz and /readyz, metrics port annotated for Prometheus). Other kinds pass through byte for byte.
//
// Settings come from Config (the `sidecar inject` flags) overridden per workload by stormgate.io/*
// annotations on the pod template (or, for a workload, on the workload itself; the template wins).
// Injection is idempotent: a pod that already carries the stormgate.io/injected annotation or a container
// named "stormgate" is left exactly as it was, so injecting an injected manifest changes nothing.
// Manifests are decoded into the k8s.io/api types strictly: a field those types do not know is an error,
// never silently dropped. Injected documents are re-encoded (keys sorted, comments inside the document
// lost, leading comment lines kept); documents that are not changed are copied unchanged.
//
// Concurrency: everything here is a pure function of its arguments; call it from any goroutine.
package inject
