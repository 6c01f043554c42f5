package k8s

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestWebhookThroughTheAPIServer: the chart's MutatingWebhookConfiguration (url pointing at the
// webhook process, run with the chart's arguments) as the API server applies it: who is injected
// (namespace label, pod label, pod annotation), what is stored (validated and defaulted by the API
// server, probes rewritten), what kubectl shows for a bad annotation, workloads' pods, re-injection,
// re-invocation after another webhook, and the webhook down under both failure policies.
func TestWebhookThroughTheAPIServer(t *testing.T) {
	ctx := context.Background()
	w := startWebhook(t, nil)
	installWebhookConfiguration(t, w, nil)
	pods := func(ns string) podClient { return podClient{t, ns} }

	optIn := namespace(t, "opt-in", map[string]string{"stormgate.io/inject": "enabled"})
	plain := namespace(t, "plain", nil)
	disabled := namespace(t, "disabled", map[string]string{"stormgate.io/inject": "disabled"})

	t.Run("selection", func(t *testing.T) {
		for _, tc := range []struct {
			name, ns string
			labels   map[string]string
			ann      map[string]string
			want     bool
		}{
			{"namespace enabled", optIn, nil, nil, true},
			{"namespace enabled, pod label false", optIn, map[string]string{"stormgate.io/inject": "false"}, nil, false},
			{"namespace enabled, pod annotation false", optIn, nil, map[string]string{"stormgate.io/inject": "false"}, false},
			{"namespace unlabelled", plain, nil, nil, false},
			{"namespace unlabelled, pod label true", plain, map[string]string{"stormgate.io/inject": "true"}, nil, true},
			{"namespace disabled, pod label true", disabled, map[string]string{"stormgate.io/inject": "true"}, nil, false},
		} {
			p := plainPod("sel")
			p.GenerateName, p.Name = "sel-", ""
			for k, v := range tc.labels {
				p.Labels[k] = v
			}
			p.Annotations = tc.ann
			got := podClient{t, tc.ns}.create(p)
			if injected(got) != tc.want {
				t.Errorf("%s: injected %v, want %v", tc.name, injected(got), tc.want)
			}
		}
	})

	t.Run("stored pod", func(t *testing.T) {
		got := pods(optIn).create(plainPod("stored"))
		if countContainers(got, "stormgate") != 1 || countContainers(got, "stormgate-init") != 1 || got.Annotations["stormgate.io/injected"] == "" {
			t.Fatalf("stored pod: %+v", got.Spec)
		}
		// The API server's defaulting ran over what the webhook added, and the probe was rewritten.
		for _, c := range slices.Concat(got.Spec.InitContainers, got.Spec.Containers) {
			if c.TerminationMessagePath == "" || c.ImagePullPolicy == "" {
				t.Errorf("container %s not defaulted: %+v", c.Name, c)
			}
		}
		if p := got.Spec.Containers[0].LivenessProbe; p.HTTPGet == nil || !strings.HasPrefix(p.HTTPGet.Path, "/app-health/") {
			t.Errorf("provider's liveness probe not rewritten: %+v", p)
		}
		sc := got.Spec.Containers[slices.IndexFunc(got.Spec.Containers, func(c corev1.Container) bool { return c.Name == "stormgate" })]
		if !slices.Contains(sc.Args, "--xds") || !slices.Contains(sc.Args, "stormgate-control-plane.stormgate-system.svc:18000") {
			t.Errorf("sidecar args %v: want the chart's control plane", sc.Args)
		}
	})

	t.Run("bad annotation refused with the reason", func(t *testing.T) {
		p := plainPod("bad")
		p.Annotations = map[string]string{"stormgate.io/upstream-conns": "100"}
		_, err := kube.Client.CoreV1().Pods(optIn).Create(ctx, p, metav1.CreateOptions{})
		// kubectl prints: Error from server (BadRequest): <this message>
		if err == nil || !strings.Contains(err.Error(), `admission webhook "namespace.inject.stormgate.io" denied the request: stormgate: not injected:`) ||
			!strings.Contains(err.Error(), "stormgate.io/upstream-conns") || !strings.Contains(err.Error(), "between 1 and 64") {
			t.Fatalf("pod with a bad annotation: %v", err)
		}
		t.Logf("kubectl shows: Error from server (BadRequest): %v", err)
	})

	t.Run("workloads", func(t *testing.T) {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "order-provider"}, Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "order-provider"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: plainPod("").ObjectMeta, Spec: plainPod("").Spec}}}
		dep.Spec.Template.Annotations = map[string]string{"stormgate.io/upstream-conns": "2"}
		d, err := kube.Client.AppsV1().Deployments(optIn).Create(ctx, dep, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "ledger"}, Spec: appsv1.StatefulSetSpec{
			Selector: dep.Spec.Selector, Template: dep.Spec.Template}}
		s, err := kube.Client.AppsV1().StatefulSets(optIn).Create(ctx, sts, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Their controllers would create these pods; none runs here, so the test does, from the stored templates.
		for _, p := range []*corev1.Pod{
			podFromTemplate(d.Spec.Template, d.Name+"-7d9f8b6c5-", "ReplicaSet", d.Name+"-7d9f8b6c5", d.UID),
			podFromTemplate(s.Spec.Template, "", "StatefulSet", s.Name, s.UID),
		} {
			if p.GenerateName == "" {
				p.Name = s.Name + "-0"
			}
			got := pods(optIn).create(p)
			sc := got.Spec.Containers[len(got.Spec.Containers)-1]
			if !injected(got) || !slices.Contains(sc.Args, "--upstream-conns") {
				t.Errorf("%s pod: %+v", p.OwnerReferences[0].Kind, got.Spec)
			}
		}
	})

	t.Run("re-injection", func(t *testing.T) {
		first := pods(optIn).create(plainPod("first"))
		again := resubmit(first, "again")
		before := w.reviews(t)
		got := pods(optIn).create(again)
		if countContainers(got, "stormgate") != 1 || countContainers(got, "stormgate-init") != 1 {
			t.Errorf("an injected pod created again has %d sidecars, %d init containers", countContainers(got, "stormgate"), countContainers(got, "stormgate-init"))
		}
		// A no-op: the stored pod (with the API server's defaults) is what injection would make.
		if after := w.reviews(t); after["unchanged"] != before["unchanged"]+1 {
			t.Errorf("re-submitting an injected pod: reviews %v -> %v, want one more unchanged", before, after)
		}
		old := resubmit(first, "old")
		old.Annotations["stormgate.io/injected"] = "0.9.0"
		got = pods(optIn).create(old)
		if countContainers(got, "stormgate") != 1 || got.Annotations["stormgate.io/injected"] == "0.9.0" {
			t.Errorf("an older injection was not upgraded: %d sidecars, version %s", countContainers(got, "stormgate"), got.Annotations["stormgate.io/injected"])
		}
	})

	t.Run("reinvocation after another webhook", func(t *testing.T) {
		other := startOtherWebhook(t)
		before := w.reviews(t)
		got := pods(optIn).create(plainPod("reinvoked"))
		after := w.reviews(t)
		if countContainers(got, "late-sidecar") != 1 || countContainers(got, "stormgate") != 1 || countContainers(got, "stormgate-init") != 1 {
			t.Fatalf("containers after another webhook: %v %v", names(got.Spec.InitContainers), names(got.Spec.Containers))
		}
		calls := 0.0
		for r, v := range after {
			calls += v - before[r]
		}
		if calls < 2 {
			t.Errorf("the webhook was called %v times for the pod; reinvocationPolicy IfNeeded should call it again after %s", calls, other)
		}
		t.Logf("containers: init %v, %v; our webhook reviewed the pod %v times (%v -> %v)", names(got.Spec.InitContainers), names(got.Spec.Containers), calls, before, after)
	})

	t.Run("webhook down", func(t *testing.T) {
		w.stop(t)
		got := pods(optIn).create(plainPod("down-ignore"))
		if injected(got) {
			t.Errorf("failurePolicy Ignore, webhook down: pod injected?")
		}
		// failurePolicy Fail: the chart with that value, the same (stopped) webhook address.
		installWebhookConfiguration(t, &webhook{url: w.url, caPEM: w.caPEM}, map[string]any{"webhook": map[string]any{"failurePolicy": "Fail"}})
		var err error
		poll(30e9, func() bool { // until the API server has the new configuration
			_, err = kube.Client.CoreV1().Pods(optIn).Create(ctx, plainPod("down-fail"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil
		})
		_, err = kube.Client.CoreV1().Pods(optIn).Create(ctx, plainPod("down-fail"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "namespace.inject.stormgate.io"`) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("failurePolicy Fail, webhook down: %v", err)
		}
		t.Logf("failurePolicy Fail, webhook down, kubectl shows: Error from server (InternalError): %v", err)
		// Other namespaces are not selected and keep working.
		if got := pods(plain).create(plainPod("unselected")); injected(got) {
			t.Error("pod in an unselected namespace injected")
		}
	})

	t.Run("webhook hangs", func(t *testing.T) {
		// A webhook that accepts and never answers: the API server gives up after timeoutSeconds
		// (2 here, 5 in the chart) and applies the failure policy.
		ca, certFile, keyFile := servingCert(t, "hung")
		release := make(chan struct{})
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		defer srv.Close()
		defer close(release)
		hung := &webhook{url: srv.URL, caPEM: ca.PEM}
		for _, policy := range []string{"Ignore", "Fail"} {
			installWebhookConfiguration(t, hung, map[string]any{"webhook": map[string]any{"failurePolicy": policy, "timeoutSeconds": 2}})
			// Until the API server has this configuration: a dry-run pod that takes the timeout.
			poll(30e9, func() bool {
				start := time.Now()
				_, err := kube.Client.CoreV1().Pods(optIn).Create(ctx, plainPod("hung-probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				return time.Since(start) > time.Second && (policy == "Ignore") == (err == nil)
			})
			start := time.Now()
			got, err := kube.Client.CoreV1().Pods(optIn).Create(ctx, plainPod("hung-"+strings.ToLower(policy)), metav1.CreateOptions{})
			took := time.Since(start)
			switch {
			case policy == "Ignore" && (err != nil || injected(got)):
				t.Errorf("failurePolicy Ignore, webhook hangs: %v (injected %v)", err, err == nil && injected(got))
			case policy == "Fail" && (err == nil || !strings.Contains(err.Error(), `failed calling webhook "namespace.inject.stormgate.io"`)):
				t.Errorf("failurePolicy Fail, webhook hangs: %v", err)
			case took < 2*time.Second || took > 10*time.Second:
				t.Errorf("failurePolicy %s, webhook hangs: the create took %v; want about timeoutSeconds (2 s)", policy, took)
			}
			t.Logf("failurePolicy %s, webhook hangs: pod create took %v: %v", policy, took.Round(100*time.Millisecond), err)
		}
	})
}

type podClient struct {
	t  *testing.T
	ns string
}

// create creates the pod and returns what the API server stored.
func (c podClient) create(p *corev1.Pod) *corev1.Pod {
	c.t.Helper()
	got, err := kube.Client.CoreV1().Pods(c.ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatalf("create pod %s%s in %s: %v", p.Name, p.GenerateName, c.ns, err)
	}
	return got
}

// podFromTemplate is the pod a workload's controller creates from its template.
func podFromTemplate(tmpl corev1.PodTemplateSpec, generateName, ownerKind, owner string, uid types.UID) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: *tmpl.ObjectMeta.DeepCopy(), Spec: *tmpl.Spec.DeepCopy()}
	p.GenerateName = generateName
	api := "apps/v1"
	yes := true
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: api, Kind: ownerKind, Name: owner, UID: uid, Controller: &yes, BlockOwnerDeletion: &yes}}
	return p
}

// resubmit is a stored pod as `kubectl get pod -o yaml | kubectl create -f -` with another name sends it.
func resubmit(p *corev1.Pod, name string) *corev1.Pod {
	q := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: p.Labels, Annotations: map[string]string{}}, Spec: *p.Spec.DeepCopy()}
	for k, v := range p.Annotations {
		q.Annotations[k] = v
	}
	return q
}

func names(cs []corev1.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// startOtherWebhook registers a second mutating webhook (configuration "zz-other", called after
// Stormgate's: the API server orders configurations by name) that appends a container to every pod of
// opted-in namespaces, as another mesh or a log shipper would. Removed at cleanup.
func startOtherWebhook(t *testing.T) string {
	t.Helper()
	ca, certFile, keyFile := servingCert(t, "other")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(rw, "bad review", http.StatusBadRequest)
			return
		}
		var pod corev1.Pod
		_ = json.Unmarshal(review.Request.Object.Raw, &pod)
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		if !slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "late-sidecar" }) {
			patch, _ := json.Marshal([]map[string]any{{"op": "add", "path": "/spec/containers/-", "value": map[string]any{
				"name": "late-sidecar", "image": "registry.example/log-shipper:1"}}})
			pt := admissionv1.PatchTypeJSONPatch
			resp.Patch, resp.PatchType = patch, &pt
		}
		out, _ := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write(out)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "https://" + ln.Addr().String() + "/"
	none := admissionregistrationv1.SideEffectClassNone
	never := admissionregistrationv1.NeverReinvocationPolicy
	fail := admissionregistrationv1.Fail
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "zz-other"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "other.example.com", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none, FailurePolicy: &fail,
			ReinvocationPolicy: &never,
			ClientConfig:       admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.PEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"stormgate.io/inject": "enabled"}},
		}}}
	mwcs := kube.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mwcs.Create(context.Background(), mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mwcs.Delete(context.Background(), mwc.Name, metav1.DeleteOptions{}) })
	// In force once a dry-run pod comes back with its container.
	ns := probeNamespace.name
	if !poll(30e9, func() bool {
		p, err := kube.Client.CoreV1().Pods(ns).Create(context.Background(), plainPod("probe-other"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && countContainers(p, "late-sidecar") == 1
	}) {
		t.Fatal("the other webhook is not in force after 30 s")
	}
	return url
}
