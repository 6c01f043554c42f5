//go:build !dataplane

package main

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"

	"github.com/stormgate/stormgate/inject"
)

// What `sidecar inject` writes, `sidecar run` takes: the injected container's arguments, with
// per-pod settings annotations and flags, parse and validate to the settings they name.
func TestInjectedArgsAreAcceptedByRun(t *testing.T) {
	pod := []byte(`apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    stormgate.io/inbound-ports: dubbo
    stormgate.io/upstream-conns: "2"
    stormgate.io/log-level: DEBUG
    stormgate.io/hold-timeout: 10s
    stormgate.io/limits-max-frame-bytes: 16MiB
    stormgate.io/drain-readonly-policy: propagate
    stormgate.io/listener-backlog: "30000"
    stormgate.io/backlog-sysctls: "true"
spec:
  containers:
  - name: app
    image: app:1
    ports: [{name: dubbo, containerPort: 20880}]
`)
	out, _, err := inject.Manifest(pod, inject.Config{Version: "0.0.0-test"})
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := yaml.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	side := p.Spec.Containers[len(p.Spec.Containers)-1]
	if side.Name != inject.ContainerName || side.Args[0] != "run" {
		t.Fatalf("container %s args %q", side.Name, side.Args)
	}
	l, err := settingsFrom(t, side.Args[1:]...)
	if err != nil {
		t.Fatalf("sidecar run %s: %v", strings.Join(side.Args[1:], " "), err)
	}
	s := l.Settings
	if s.GetUpstream().GetConnections() != 2 || s.GetLog().GetLevel() != "debug" || s.GetHold().GetTimeout().AsDuration().String() != "10s" ||
		s.GetLimits().GetMaxFrameBytes() != 16<<20 || s.GetDrain().GetReadonlyPolicy().String() != "PROPAGATE" ||
		s.GetListener().GetBacklog() != 30000 || len(s.GetListener().GetInboundPorts()) != 1 || s.GetListener().GetInboundPorts()[0] != 20880 ||
		!s.GetListener().GetTransparent() {
		t.Errorf("run %q made %v", side.Args, s)
	}
}

// `sidecar upgrade --binary -` writes where injection mounts the writable volume.
func TestUploadDirIsTheInjectedVolume(t *testing.T) {
	if uploadDir != inject.UpgradeDir {
		t.Errorf("upgrade --into default %s, inject mounts %s", uploadDir, inject.UpgradeDir)
	}
}
