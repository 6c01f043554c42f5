// Package pod runs Stormgate the way Kubernetes users run it, in real containers, with podman: it builds
// the sidecar image and a provider image without a Docker daemon (build/image, as `make image` does),
// runs `sidecar inject` on a provider Deployment with mTLS to a control plane, plays the injected
// manifest as a pod (`podman kube play`), and checks from outside the pod that consumers are answered
// through Stormgate, that the probes and security settings are what injection promised, and that
// `podman kube down` leaves nothing behind.
//
// The test needs root and podman (Debian: apt-get install podman buildah runc); without them it skips
// and says so. It writes its own containers.conf (CONTAINERS_CONF) with the host facts podman 4.3 needs
// here: runc (crun refuses pods on hybrid cgroups), ulimits within the host's hard limits, and no
// remote image ever pulled. The pod runs on a podman network the test creates in 198.18.0.0/15 and
// 2001:db8::/32, with ports published on 127.0.0.1 only. Everything it creates (images, network, pod,
// files) is removed at cleanup, also when it fails.
//
// Concurrency: one test, run alone; it owns every podman object it names (all carry a random suffix).
package pod
