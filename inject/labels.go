package inject

import (
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/stormgate/stormgate/xds"
)

// EnvPodLabels is the variable `sidecar run` reads the pod's labels from (k=v,k=v) to report them to
// the control plane, whose selectors match on them.
const EnvPodLabels = xds.EnvPodLabels

// xdsLabelEnv passes the pod's labels to the sidecar through the downward API: one variable per label
// (fieldRef metadata.labels['key'], so the value is the pod's own when the container starts), then
// STORMGATE_POD_LABELS joining them, which Kubernetes expands from the variables before it. Label
// values cannot hold ',' or '=', so the joined form is unambiguous. The namespace comes from
// POD_NAMESPACE, set for the node id.
func xdsLabelEnv(labels map[string]string) []corev1.EnvVar {
	if len(labels) == 0 {
		return nil
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]corev1.EnvVar, 0, len(keys)+1)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		name := "STORMGATE_POD_LABEL_" + strconv.Itoa(i)
		env = append(env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['" + k + "']"}}})
		pairs[i] = k + "=$(" + name + ")"
	}
	return append(env, corev1.EnvVar{Name: EnvPodLabels, Value: strings.Join(pairs, ",")})
}
