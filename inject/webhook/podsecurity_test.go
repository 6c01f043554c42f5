package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestPodSecurityPaths: under PodSecurityPath+level a pod that would get the redirect init container
// is refused (403) with the reason and explicit-port mode as the way out; the same pod in
// explicit-port mode is injected there; an unknown level is a 404 (a configuration error the API
// server reports per its failurePolicy).
func TestPodSecurityPaths(t *testing.T) {
	h, err := New(Config{Inject: testConfig}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	post := func(path, annotations string) (*admissionv1.AdmissionResponse, int) {
		t.Helper()
		pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","annotations":{` + annotations + `}},` +
			`"spec":{"containers":[{"name":"app","image":"app:1","ports":[{"containerPort":20880}]}]}}`
		body, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Namespace: "shop", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(pod)}},
		})
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var out admissionv1.AdmissionReview
		if w.Code == 200 {
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
		}
		return out.Response, w.Code
	}
	for _, level := range []string{"baseline", "restricted"} {
		resp, code := post(PodSecurityPath+level, "")
		if code != 200 || resp.Allowed || resp.Result.Code != http.StatusForbidden {
			t.Fatalf("%s: %d %+v", level, code, resp)
		}
		for _, want := range []string{`enforces Pod Security "` + level + `"`, "NET_ADMIN", `stormgate.io/redirect: "none"`, "targetPort: sg-dubbo", `stormgate.io/inject: "false"`} {
			if !strings.Contains(resp.Result.Message, want) {
				t.Errorf("%s: message lacks %q: %s", level, want, resp.Result.Message)
			}
		}
		resp, code = post(PodSecurityPath+level, `"stormgate.io/redirect":"none"`)
		if code != 200 || !resp.Allowed || len(resp.Patch) == 0 || bytes.Contains(resp.Patch, []byte("stormgate-init")) {
			t.Errorf("%s, explicit-port mode: %d %+v", level, code, resp)
		}
	}
	if resp, code := post(Path, ""); code != 200 || !resp.Allowed || !bytes.Contains(resp.Patch, []byte("stormgate-init")) {
		t.Errorf("%s: %d %+v", Path, code, resp)
	}
	if _, code := post(PodSecurityPath+"privileged", ""); code != http.StatusNotFound {
		t.Errorf("privileged path: %d, want 404", code)
	}
}
