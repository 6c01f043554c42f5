package inject

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestExplicitPortMode: stormgate.io/redirect: none injects no init container and asks for no
// capability (what Pod Security baseline and restricted allow); the sidecar forwards its proxy port to
// the one provider port on loopback, declares that port by name for Services, and leaves the
// provider's probes alone (no redirect catches them). Injecting the result again changes nothing.
func TestExplicitPortMode(t *testing.T) {
	in := []byte(`apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations: {stormgate.io/redirect: none}
spec:
  containers:
  - name: app
    image: app:1
    ports: [{name: dubbo, containerPort: 20880}]
    livenessProbe: {tcpSocket: {port: dubbo}}
`)
	out, res, err := Manifest(in, Config{Version: "1.2.3"})
	if err != nil || len(res) != 1 || res[0].Action != ActionInjected {
		t.Fatalf("%v %v", res, err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(out, &pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.InitContainers) != 0 {
		t.Errorf("init containers %v, want none", pod.Spec.InitContainers)
	}
	i := slices.IndexFunc(pod.Spec.Containers, isOurs)
	if i < 0 {
		t.Fatalf("no %s container:\n%s", ContainerName, out)
	}
	sc := pod.Spec.Containers[i]
	args := strings.Join(sc.Args, " ")
	if !strings.HasPrefix(args, "run --listen [::]:15006 --upstream 127.0.0.1:20880 ") || strings.Contains(args, "--transparent") || strings.Contains(args, "--inbound-ports") {
		t.Errorf("sidecar args %q", args)
	}
	if !slices.Contains(sc.Ports, corev1.ContainerPort{Name: ProxyPortName, ContainerPort: DefaultProxyPort, Protocol: corev1.ProtocolTCP}) {
		t.Errorf("sidecar ports %v lack %s", sc.Ports, ProxyPortName)
	}
	if sc.SecurityContext.Capabilities.Add != nil || !*sc.SecurityContext.RunAsNonRoot {
		t.Errorf("sidecar security context %+v", sc.SecurityContext)
	}
	if p := pod.Spec.Containers[0].LivenessProbe; p.TCPSocket == nil || p.TCPSocket.Port.StrVal != "dubbo" {
		t.Errorf("the provider's probe was changed: %+v", p)
	}
	again, res, err := Manifest(out, Config{Version: "1.2.3"})
	if err != nil || res[0].Action != ActionAlreadyInjected || string(again) != string(out) {
		t.Errorf("re-injection: %v %v\n%s", res, err, again)
	}
	// A new version rebuilds it, still without an init container.
	up, res, err := Manifest(out, Config{Version: "1.2.4"})
	if err != nil || res[0].Action != ActionUpdated || strings.Contains(string(up), InitContainerName) {
		t.Errorf("upgrade: %v %v\n%s", res, err, up)
	}
}

// TestRedirectRefusals: explicit-port mode forwards one port; an unknown mode names both.
func TestRedirectRefusals(t *testing.T) {
	for _, tc := range []struct{ ann, want string }{
		{`stormgate.io/redirect: none, stormgate.io/inbound-ports: "20880,20881"`, "forwards exactly one port"},
		{`stormgate.io/redirect: tproxy`, `want "init-container"`},
	} {
		if _, _, err := Manifest(podWith(tc.ann), Config{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.ann, err, tc.want)
		}
	}
	if _, res, err := Manifest(podWith(`stormgate.io/redirect: init-container`), Config{}); err != nil || res[0].Action != ActionInjected {
		t.Errorf("init-container: %v %v", res, err)
	}
}

// TestReinjectAfterAPIServerDefaults: the API server stores an injected pod with its defaults filled in
// (terminationMessagePath, imagePullPolicy, a probe's successThreshold, ...). Submitting that pod again
// (kubectl get -o yaml | kubectl create, or the webhook's reinvocation) is a no-op, not "re-injected
// with changed settings". Found by the real API server in k8s/ (TestWebhookThroughTheAPIServer).
func TestReinjectAfterAPIServerDefaults(t *testing.T) {
	out, _, err := Manifest(podWith(""), Config{Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(out, &pod); err != nil {
		t.Fatal(err)
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			cs[i].TerminationMessagePath = corev1.TerminationMessagePathDefault
			cs[i].ImagePullPolicy = corev1.PullIfNotPresent
			for j := range cs[i].Ports {
				cs[i].Ports[j].Protocol = corev1.ProtocolTCP
			}
		}
	}
	pod.Spec.RestartPolicy, pod.Spec.DNSPolicy, pod.Spec.SchedulerName = corev1.RestartPolicyAlways, corev1.DNSClusterFirst, "default-scheduler"
	action, warnings, err := Pod(&pod.ObjectMeta, &pod.Spec, nil, Config{Version: "1.2.3"})
	if err != nil || action != ActionAlreadyInjected || len(warnings) != 0 {
		t.Errorf("re-injecting the stored pod: %s %v %v, want %s and no warning", action, warnings, err, ActionAlreadyInjected)
	}
	if c := pod.Spec.Containers[len(pod.Spec.Containers)-1]; c.TerminationMessagePath == "" {
		t.Errorf("the stored pod's defaults were dropped: %+v", c)
	}
}
