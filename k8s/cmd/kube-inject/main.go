// Command kube-inject is `sidecar inject -f FILE [--image IMAGE]` done by a real API server: it creates
// the Deployment of FILE in a new namespace labelled stormgate.io/inject=enabled, creates the pod its
// ReplicaSet would create from the stored template (no controller manager runs in the test cluster),
// and prints the Deployment again with that template replaced by the pod the API server stored: what
// the admission webhook injected, validated and defaulted. --image becomes the stormgate.io/image
// annotation, as the flag would.
//
// The pod test (e2e/pod) runs it in place of `sidecar inject` when STORMGATE_POD_INJECT names it;
// k8s/ TestStoredPodRunsInPodman sets that up, with the cluster's kubeconfig in STORMGATE_KUBECONFIG.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kube-inject:", err)
		os.Exit(1)
	}
}

func run() error {
	file := flag.String("f", "", "the Deployment manifest")
	image := flag.String("image", "", "Stormgate image (the stormgate.io/image annotation)")
	flag.Parse()
	in, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(in, &d); err != nil {
		return fmt.Errorf("%s: want one Deployment: %w", *file, err)
	}
	kubeconfig := os.Getenv("STORMGATE_KUBECONFIG")
	if kubeconfig == "" {
		return errors.New("STORMGATE_KUBECONFIG is not set")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "pod-test-", Labels: map[string]string{"stormgate.io/inject": "enabled"}}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	no := false // as a hardened namespace's default ServiceAccount: no token volume (podman has no such thing)
	if _, err := c.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"},
		AutomountServiceAccountToken: &no}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if *image != "" {
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations["stormgate.io/image"] = *image
	}
	stored, err := c.AppsV1().Deployments(ns.Name).Create(ctx, &d, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the Deployment: %w", err)
	}
	yes := true
	pod := &corev1.Pod{ObjectMeta: *stored.Spec.Template.ObjectMeta.DeepCopy(), Spec: *stored.Spec.Template.Spec.DeepCopy()}
	pod.GenerateName = stored.Name + "-5f7c9d8b6-"
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: stored.Name + "-5f7c9d8b6",
		UID: stored.UID, Controller: &yes, BlockOwnerDeletion: &yes}}
	got, err := c.CoreV1().Pods(ns.Name).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create the pod: %w", err)
	}
	got, err = c.CoreV1().Pods(ns.Name).Get(ctx, got.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if got.Annotations["stormgate.io/injected"] == "" {
		return fmt.Errorf("pod %s/%s was stored without Stormgate: is the webhook configuration in place?", ns.Name, got.Name)
	}
	out := d.DeepCopy()
	out.Spec.Template.ObjectMeta = metav1.ObjectMeta{Labels: got.Labels, Annotations: got.Annotations}
	out.Spec.Template.Spec = got.Spec
	b, err := yaml.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "kube-inject: %s: injected by the API server's webhook as pod %s/%s\n", *file, ns.Name, got.Name)
	_, err = os.Stdout.Write(b)
	return err
}
