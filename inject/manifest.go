package inject

import (
	"bytes"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Result describes what Manifest did with one YAML document.
type Result struct {
	Doc       int    // document number in the input, from 1
	Kind      string // empty for a document with no object (blank or comments only)
	Namespace string
	Name      string
	Action    Action
	Warnings  []string
}

func (r Result) String() string { return r.describe() + ": " + string(r.Action) }

// describe names the document: "document 2, Deployment shop/provider".
func (r Result) describe() string {
	what := r.Kind
	if r.Name != "" {
		what += " " + r.Name
		if r.Namespace != "" {
			what = r.Kind + " " + r.Namespace + "/" + r.Name
		}
	}
	if what == "" {
		what = "(empty)"
	}
	return fmt.Sprintf("document %d, %s", r.Doc, what)
}

// Manifest injects Stormgate into every Deployment (apps/v1), StatefulSet (apps/v1) and Pod (v1) in in,
// a YAML stream of one or more documents separated by "---" lines, and returns the stream with those
// documents re-encoded and every other document, and every separator, copied byte for byte. A document
// that cannot be decoded into its Kubernetes type (including one with a field the type does not know) is
// an error naming the document; nothing is returned then.
func Manifest(in []byte, cfg Config) ([]byte, []Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	docs, err := splitDocuments(in)
	if err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	results := make([]Result, 0, len(docs))
	for i, d := range docs {
		body, res, err := document(d.body, cfg)
		res.Doc = i + 1
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", res.describe(), err)
		}
		out.WriteString(d.sep)
		out.Write(body)
		results = append(results, res)
	}
	return out.Bytes(), results, nil
}

// header is enough of any object to route it.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Status any `json:"status"`
}

// document injects one document, returning its new bytes (the input itself when unchanged).
func document(body []byte, cfg Config) ([]byte, Result, error) {
	res := Result{Action: ActionPassedThrough}
	if isBlank(body) {
		return body, res, nil
	}
	var h header
	if err := yaml.Unmarshal(body, &h); err != nil {
		return nil, res, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	res.Kind, res.Name, res.Namespace = h.Kind, h.Metadata.Name, h.Metadata.Namespace

	var obj any
	var meta *metav1.ObjectMeta
	var spec *corev1.PodSpec
	var parent map[string]string
	switch {
	case h.APIVersion == "v1" && h.Kind == "Pod":
		p := &corev1.Pod{}
		obj, meta, spec = p, &p.ObjectMeta, &p.Spec
	case h.APIVersion == "apps/v1" && h.Kind == "Deployment":
		d := &appsv1.Deployment{}
		obj, meta, spec = d, &d.Spec.Template.ObjectMeta, &d.Spec.Template.Spec
	case h.APIVersion == "apps/v1" && h.Kind == "StatefulSet":
		s := &appsv1.StatefulSet{}
		obj, meta, spec = s, &s.Spec.Template.ObjectMeta, &s.Spec.Template.Spec
	case h.Kind == "Pod":
		res.Warnings = append(res.Warnings, fmt.Sprintf("not injected: apiVersion %q; only v1 Pods are", h.APIVersion))
		return body, res, nil
	case h.Kind == "Deployment" || h.Kind == "StatefulSet":
		res.Warnings = append(res.Warnings, fmt.Sprintf("not injected: apiVersion %q; only apps/v1 is", h.APIVersion))
		return body, res, nil
	default:
		return body, res, nil
	}
	if err := yaml.UnmarshalStrict(body, obj); err != nil {
		return nil, res, fmt.Errorf("decode %s: %w", h.Kind, err)
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		parent = o.Annotations
	case *appsv1.StatefulSet:
		parent = o.Annotations
	}
	action, warnings, err := Pod(meta, spec, parent, cfg)
	res.Action, res.Warnings = action, append(res.Warnings, warnings...)
	if err != nil || !action.Changed() {
		return body, res, err
	}
	enc, err := encode(obj, h.Status != nil)
	if err != nil {
		return nil, res, err
	}
	return append(leadingComments(body), enc...), res, nil
}

// encode writes obj as YAML without the noise the API types carry when empty (creationTimestamp: null,
// status: {}, and a zero status the input did not have), which the API server ignores anyway.
func encode(obj any, keepStatus bool) ([]byte, error) {
	j, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	if err := json.Unmarshal(j, &tree); err != nil {
		return nil, err
	}
	prune(tree)
	if !keepStatus {
		delete(tree, "status")
	}
	return yaml.Marshal(tree)
}

func prune(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, child := range t {
			if k == "creationTimestamp" && child == nil {
				delete(t, k)
				continue
			}
			prune(child)
			if m, ok := child.(map[string]any); ok && k == "status" && len(m) == 0 {
				delete(t, k)
			}
		}
	case []any:
		for _, child := range t {
			prune(child)
		}
	}
}

// segment is one document and the separator line that came before it ("" for the first).
type segment struct {
	sep  string
	body []byte
}

// splitDocuments splits a YAML stream on "---" lines (a comment may follow on the line). Separators and
// bodies are kept verbatim, so joining them gives the input back.
func splitDocuments(in []byte) ([]segment, error) {
	segs := []segment{{}}
	n := 0
	for line := range bytes.Lines(in) {
		n++
		if isSeparator(line) {
			segs = append(segs, segment{sep: string(line)})
			continue
		}
		if bytes.HasPrefix(line, []byte("--- ")) || bytes.HasPrefix(line, []byte("---\t")) {
			return nil, fmt.Errorf("line %d: content on a document separator line is not supported: put it on the next line", n)
		}
		last := &segs[len(segs)-1]
		last.body = append(last.body, line...)
	}
	return segs, nil
}

func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("---"))
	if !ok {
		return false
	}
	if len(rest) == 0 {
		return true
	}
	if rest[0] != ' ' && rest[0] != '\t' {
		return false // "----" or "---x" is content, not a separator
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

// isBlank reports a document with nothing but blank lines and comments.
func isBlank(body []byte) bool {
	for line := range bytes.Lines(body) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}

// leadingComments returns the blank and comment lines at the top of body, which re-encoding would lose.
func leadingComments(body []byte) []byte {
	var out []byte
	for line := range bytes.Lines(body) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' {
			break
		}
		out = append(out, line...)
	}
	return out
}
