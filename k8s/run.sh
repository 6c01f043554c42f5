#!/usr/bin/env bash
# make k8s-test: Stormgate against a real Kubernetes API server (this module's tests, see doc.go).
# Builds what it needs into ../bin, keyed by version so that later runs reuse it:
#   bin/k8s/kube-apiserver-<version>   from k8s.io/kubernetes (go.mod pins it; ~6 min on 2 idle cores,
#                                      16-28 min measured on a busy one; the Go build cache makes a rebuild fast)
#   bin/k8s/etcd-<version>             from go.etcd.io/etcd/server/v3 (Debian's etcd-server is 3.4,
#                                      older than kube-apiserver 1.34 supports)
#   bin/sidecar                        from the main module (make build)
# then runs the tests, and the pod test (e2e/pod, podman) on the pod the API server stored.
#   bash k8s/run.sh                              # everything
#   bash k8s/run.sh -run TestPodSecurityLevels -update   # regenerate docs/kubernetes.md's table
# Extra arguments go to `go test` (not to the pod test). GO picks the go command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
# This module stands alone: a go.work above it must not pull it into the main module, or vice versa.
export GOWORK=off
GO=${GO:-go}
if ! command -v "$GO" >/dev/null 2>&1; then
  echo "k8s-test: no Go toolchain ($GO): install Go 1.26 (go.mod's go line) and put it on PATH" >&2
  exit 1
fi
bin=$(cd .. && pwd)/bin
mkdir -p "$bin/k8s"
kube_version=$("$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$("$GO" list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
apiserver=$bin/k8s/kube-apiserver-$kube_version
etcd=$bin/k8s/etcd-$etcd_version

build() { # build OUT PACKAGE LDFLAGS: into OUT.tmp, then renamed, so an interrupted build is never used
  local out=$1 pkg=$2 ldflags=$3 start=$SECONDS
  echo "k8s-test: building $(basename "$out") (first run only) ..."
  "$GO" build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg"
  mv "$out.tmp" "$out"
  echo "k8s-test: built $(basename "$out") in $((SECONDS - start)) s"
}
if [ ! -x "$apiserver" ]; then
  minor=${kube_version#v1.}; minor=${minor%%.*}
  build "$apiserver" k8s.io/kubernetes/cmd/kube-apiserver \
    "-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
fi
if [ ! -x "$etcd" ]; then
  build "$etcd" go.etcd.io/etcd/server/v3 "-s -w"
fi
(cd .. && make --no-print-directory build >/dev/null)

export STORMGATE_KUBE_APISERVER=$apiserver STORMGATE_ETCD=$etcd STORMGATE_SIDECAR=$bin/sidecar
"$GO" test -count=1 -v -timeout 20m "$@" .
