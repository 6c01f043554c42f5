// Package inject adds Stormgate to Kubernetes workloads: given Deployment, StatefulSet and Pod manifests
// (YAML, one or several documents), it adds to each pod template an init container that installs the
// inbound redirect rules (`sidecar iptables`: nftables over netlink, IPv4 and IPv6; CAP_NET_ADMIN only,
// run as root) and the Stormgate container (`sidecar run --transparent` on [::], non-root, read-only
// root filesystem, no capabilities, probes on /healthz and /readyz, metrics port annotated for
// Prometheus). Both run the one image, by default stormgate/sidecar:<version of the injecting binary>.
// The application's tcpSocket and httpGet probes on redirected ports are rewritten to go through the
// sidecar's /app-health paths (package appprobe), so they still test the provider. With the TLS
// settings, the control plane's CA and the sidecar's client certificate are mounted from Secrets.
// Other kinds pass through byte for byte.
//
// Settings come from Config (the `sidecar inject` flags) overridden per workload by stormgate.io/*
// annotations on the pod template (or, for a workload, on the workload itself; the template wins), and
// are checked with the sidecar's own settings validation, so a value the sidecar would refuse at start
// is refused here. Pod is the one code path: `sidecar inject` (Manifest) and the admission webhook
// (package webhook) both call it. Injection is idempotent and upgrades: an injected pod records the
// version in stormgate.io/injected and is rebuilt from its original spec, unchanged when version and
// settings are the same. Manifests are decoded into the k8s.io/api types strictly: a field those types
// do not know is an error, never silently dropped. Injected documents are re-encoded (keys sorted,
// comments inside the document lost, leading comment lines kept); documents that are not changed are
// copied unchanged.
//
// Concurrency: everything here is a pure function of its arguments; call it from any goroutine.
package inject
