// Package webhook is Stormgate's mutating admission webhook: automatic injection as Kubernetes users
// know it from Istio. The API server sends each new Pod of an opted-in namespace or pod (the
// MutatingWebhookConfiguration's selectors, deploy/inject-webhook.yaml) as an AdmissionReview v1; the
// handler runs inject.Pod on it, the same code path as `sidecar inject`, and answers with a JSON patch
// from the pod it received to the injected pod. So the webhook and the CLI never drift apart: a test
// applies the patch the way the API server does and compares the result with the CLI's output.
//
// It never fails a pod it cannot inject unless told to: an invalid stormgate.io/* annotation admits
// the pod unchanged with a warning the user sees (kubectl prints admission warnings), a log line and a
// counted error; with Config.DenyOnError the pod is rejected with the reason instead. A request it
// cannot read is answered 400, which the API server treats per the configuration's failurePolicy
// (Ignore in deploy/). Pods already injected are rebuilt like the CLI does: unchanged (no patch) for
// the same version and settings, updated for another.
//
// Concurrency: a Handler is immutable after New and serves requests concurrently.
package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/stormgate/stormgate/inject"
)

// Path is where the handler expects AdmissionReviews (the configuration's clientConfig.service.path).
const Path = "/inject"

// PodSecurityPath + a Pod Security level ("baseline", "restricted") is where the configuration sends
// pods of namespaces that enforce that level (selected by their pod-security.kubernetes.io/enforce
// label: the AdmissionReview does not carry the namespace's labels). There, a pod that injection would
// give the redirect init container (root, NET_ADMIN: refused by both levels) is rejected with the
// reason and the way out (explicit-port mode), instead of the Pod Security plugin's terser refusal.
const PodSecurityPath = Path + "/pod-security/"

// Pod Security levels whose namespaces refuse the redirect init container.
var initRefusingLevels = []string{"baseline", "restricted"}

// maxBody bounds a review: the API server's own request limit is 3 MiB.
const maxBody = 8 << 20

// LabelInject on a pod (or its template) opts it in ("true") or out ("false"); on a namespace,
// "enabled" opts every pod in it in. The selectors of the MutatingWebhookConfiguration use them; the
// handler honors a pod's "false" too, in case the configuration's selectors were edited.
const LabelInject = "stormgate.io/inject"

// Config is the webhook's configuration.
type Config struct {
	// Inject is what `sidecar inject` flags would set; stormgate.io/* annotations on each pod override it.
	Inject inject.Config
	// DenyOnError rejects a pod whose injection fails (an invalid annotation) instead of admitting it
	// without Stormgate.
	DenyOnError bool
}

// Handler serves AdmissionReview v1 requests for Pods.
type Handler struct {
	cfg     Config
	log     *zap.Logger
	reviews *prometheus.CounterVec
}

// Review results, the label of stormgate_webhook_reviews_total.
const (
	resultInjected  = "injected"
	resultUpdated   = "updated"
	resultUnchanged = "unchanged" // already injected with this version and settings
	resultSkipped   = "skipped"   // opted out, host network, not a pod CREATE
	resultError     = "error"     // could not inject; admitted unchanged
	resultDenied    = "denied"    // could not inject; rejected (DenyOnError)
	resultBad       = "bad_request"
)

// New checks cfg and registers stormgate_webhook_reviews_total{result} on reg (nil: not registered).
func New(cfg Config, log *zap.Logger, reg prometheus.Registerer) (*Handler, error) {
	if err := cfg.Inject.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	h := &Handler{cfg: cfg, log: log, reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stormgate_webhook_reviews_total",
		Help: "Admission reviews answered, by result (injected, updated, unchanged, skipped, error, denied, bad_request).",
	}, []string{"result"})}
	for _, r := range []string{resultInjected, resultUpdated, resultUnchanged, resultSkipped, resultError, resultDenied, resultBad} {
		h.reviews.WithLabelValues(r)
	}
	if reg != nil {
		if err := reg.Register(h.reviews); err != nil {
			return nil, err
		}
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	level := ""
	if rest, ok := strings.CutPrefix(r.URL.Path, PodSecurityPath); ok {
		if !slices.Contains(initRefusingLevels, rest) {
			h.bad(w, http.StatusNotFound, "Pod Security level "+rest+": want "+PodSecurityPath+"baseline or "+PodSecurityPath+"restricted")
			return
		}
		level = rest
	}
	if r.Method != http.MethodPost {
		h.bad(w, http.StatusMethodNotAllowed, "use POST with an AdmissionReview")
		return
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
		h.bad(w, http.StatusUnsupportedMediaType, "content type "+r.Header.Get("Content-Type")+": want application/json")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		h.bad(w, http.StatusBadRequest, "request body unreadable or over 8 MiB")
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		h.bad(w, http.StatusBadRequest, fmt.Sprintf("not an AdmissionReview with a request: %v", err))
		return
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" {
		h.bad(w, http.StatusBadRequest, "apiVersion "+review.APIVersion+" kind "+review.Kind+": want admission.k8s.io/v1 AdmissionReview")
		return
	}
	resp := h.review(review.Request, level)
	out, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
	if err != nil {
		h.bad(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (h *Handler) bad(w http.ResponseWriter, code int, msg string) {
	h.reviews.WithLabelValues(resultBad).Inc()
	h.log.Warn("admission request refused", zap.Int("status", code), zap.String("reason", msg))
	http.Error(w, msg, code)
}

// Review answers one admission request: allowed always (unless DenyOnError and injection failed), with
// a JSON patch when the pod was injected or updated.
func (h *Handler) Review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return h.review(req, "")
}

// review is Review for a namespace that enforces Pod Security level ("" when unknown or privileged).
func (h *Handler) review(req *admissionv1.AdmissionRequest, level string) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	log := h.log.With(zap.String("uid", string(req.UID)), zap.String("namespace", req.Namespace), zap.String("name", req.Name))
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		h.reviews.WithLabelValues(resultSkipped).Inc()
		return resp
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return h.failed(resp, log, fmt.Errorf("pod does not decode: %w", err))
	}
	if v, ok := pod.Labels[LabelInject]; ok && strings.EqualFold(strings.TrimSpace(v), "false") {
		h.reviews.WithLabelValues(resultSkipped).Inc()
		return resp
	}
	before, err := json.Marshal(&pod)
	if err != nil {
		return h.failed(resp, log, err)
	}
	action, warnings, err := inject.Pod(&pod.ObjectMeta, &pod.Spec, nil, h.cfg.Inject)
	if err != nil {
		return h.failed(resp, log, err)
	}
	for _, w := range warnings {
		resp.Warnings = append(resp.Warnings, "stormgate: "+w)
	}
	result := map[inject.Action]string{
		inject.ActionInjected: resultInjected, inject.ActionUpdated: resultUpdated,
		inject.ActionAlreadyInjected: resultUnchanged, inject.ActionSkipped: resultSkipped,
	}[action]
	if action.Changed() && level != "" && slices.ContainsFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == inject.InitContainerName }) {
		h.reviews.WithLabelValues(resultDenied).Inc()
		log.Warn("pod denied: Pod Security forbids the redirect init container", zap.String("level", level))
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden, Message: PodSecurityRefusal(req.Namespace, level)}
		return resp
	}
	if action.Changed() {
		after, err := json.Marshal(&pod)
		if err != nil {
			return h.failed(resp, log, err)
		}
		ops, err := Diff(before, after)
		if err == nil {
			resp.Patch, err = json.Marshal(ops)
		}
		if err != nil {
			return h.failed(resp, log, fmt.Errorf("patch: %w", err))
		}
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
	}
	h.reviews.WithLabelValues(result).Inc()
	log.Info("pod reviewed", zap.String("result", result), zap.Strings("warnings", warnings))
	return resp
}

// failed admits the pod unchanged with a warning, or with DenyOnError rejects it, saying why.
func (h *Handler) failed(resp *admissionv1.AdmissionResponse, log *zap.Logger, err error) *admissionv1.AdmissionResponse {
	msg := "stormgate: not injected: " + err.Error()
	if h.cfg.DenyOnError {
		h.reviews.WithLabelValues(resultDenied).Inc()
		log.Warn("pod denied: cannot inject", zap.Error(err))
		resp.Allowed = false
		resp.Result = &metav1.Status{Message: msg + " (fix the stormgate.io/* annotations, or label the pod " + LabelInject + `: "false")`, Code: http.StatusBadRequest}
		return resp
	}
	h.reviews.WithLabelValues(resultError).Inc()
	log.Warn("pod admitted without Stormgate: cannot inject", zap.Error(err))
	resp.Warnings = append(resp.Warnings, msg)
	return resp
}

// PodSecurityRefusal is the message of a pod refused in a namespace that enforces level: the reason and
// the ways out, the first of which keeps Stormgate.
func PodSecurityRefusal(namespace, level string) string {
	return fmt.Sprintf("stormgate: not injected: namespace %q enforces Pod Security %q (label pod-security.kubernetes.io/enforce), which forbids "+
		"Stormgate's init container %s: it runs as root with NET_ADMIN to redirect the provider's ports to the sidecar. "+
		"Ways out: annotate the pod template %s: %q (explicit-port mode: no init container, no capability; consumers connect to the sidecar's port %d, "+
		"e.g. through a Service with targetPort: %s), or label the pod %s: \"false\" to run it without Stormgate, or label the namespace "+
		"pod-security.kubernetes.io/enforce=privileged; see docs/kubernetes.md, \"Pod Security\"",
		namespace, level, inject.InitContainerName, inject.AnnotationRedirect, inject.RedirectNone, inject.DefaultProxyPort, inject.ProxyPortName, LabelInject)
}
