package settings

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

func TestMergeLayersAttributesEachField(t *testing.T) {
	file := &sg.Settings{Hold: &sg.Hold{Timeout: dur(5 * time.Second)}, Upstream: &sg.Upstream{Connections: proto.Int32(8)}}
	flags := &sg.Settings{Listener: &sg.Listener{Address: proto.String("127.0.0.1:20999")}, Upstream: &sg.Upstream{Connections: proto.Int32(2)}}
	l := MergeLayers("/etc/stormgate.yaml",
		Layer{SourceDefaults, Defaults()}, Layer{SourceFile, file}, Layer{SourceFlag, flags})
	if err := Validate(l.Settings); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"hold.timeout":         SourceFile,
		"upstream.connections": SourceFlag, // the flag overrides the file
		"listener.address":     SourceFlag,
		"hold.max_requests":    SourceDefaults,
	}
	for f, src := range want {
		if l.Sources[f] != src {
			t.Errorf("%s: source %q, want %q", f, l.Sources[f], src)
		}
	}
	if len(l.Sources) != len(fieldRules) {
		t.Errorf("%d fields attributed, want every leaf (%d)", len(l.Sources), len(fieldRules))
	}
	// With a file, the source is the file, as after a SIGHUP reload of it (issue 24: the start-up
	// line said "flag" and /config_dump "file" for the same run); field by field, Sources says more.
	if l.Source != SourceFile || l.File != "/etc/stormgate.yaml" {
		t.Errorf("source %q file %q", l.Source, l.File)
	}
	if l.Settings.GetUpstream().GetConnections() != 2 || l.Settings.GetHold().GetTimeout().AsDuration() != 5*time.Second {
		t.Errorf("merge: %v", l.Settings)
	}
	// Flags alone (the issue: "--listen/--upstream and no file" showed "defaults").
	l = MergeLayers("", Layer{SourceDefaults, Defaults()}, Layer{SourceFile, nil}, Layer{SourceFlag, flags})
	if l.Source != SourceFlag || l.Sources["listener.address"] != SourceFlag || l.File != "" {
		t.Errorf("flags only: source %q, listener.address from %q", l.Source, l.Sources["listener.address"])
	}
}

func TestChanges(t *testing.T) {
	prev := Defaults()
	next := Merge(prev, &sg.Settings{
		Hold:   &sg.Hold{Timeout: dur(5 * time.Second)},
		Drain:  &sg.Drain{ReadonlyPolicy: sg.ReadonlyPolicy_PROPAGATE.Enum()},
		Log:    &sg.Log{Level: proto.String("info")}, // unchanged
		Limits: &sg.Limits{MaxFrameBytes: proto.Int32(1 << 20)},
	})
	got := ChangeStrings(Changes(prev, next))
	want := []string{
		"hold.timeout: 3s -> 5s",
		"limits.max_frame_bytes: 8388608 -> 1048576",
		"drain.readonly_policy: HOLD -> PROPAGATE",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("changes %q, want %q", got, want)
	}
	if cs := Changes(next, next); len(cs) != 0 {
		t.Fatalf("no change expected: %v", cs)
	}
}

type dumpJSON struct {
	Version      string            `json:"version"`
	Source       string            `json:"source"`
	File         string            `json:"file"`
	Rejecting    bool              `json:"rejecting"`
	LastRejected *Rejection        `json:"last_rejected"`
	FieldSources map[string]string `json:"field_sources"`
}

func dump(t *testing.T, st *Store) dumpJSON {
	t.Helper()
	rec := httptest.NewRecorder()
	st.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/config_dump", nil))
	var d dumpJSON
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatalf("%v\n%s", err, rec.Body)
	}
	return d
}

// /config_dump shows where each field came from, across an xDS push, and the
// last rejected version with its error; stormgate_xds_rejecting follows.
func TestStoreProvenanceAndRejection(t *testing.T) {
	reg := prometheus.NewRegistry()
	base := MergeLayers("s.yaml", Layer{SourceDefaults, Defaults()},
		Layer{SourceFile, &sg.Settings{Hold: &sg.Hold{Timeout: dur(5 * time.Second)}}},
		Layer{SourceFlag, &sg.Settings{Upstream: &sg.Upstream{Connections: proto.Int32(2)}}})
	st, err := NewLayeredStore(base, "v0", reg)
	if err != nil {
		t.Fatal(err)
	}
	d := dump(t, st)
	if d.Source != SourceFile || d.File != "s.yaml" || d.FieldSources["hold.timeout"] != SourceFile ||
		d.FieldSources["upstream.connections"] != SourceFlag || d.FieldSources["admission.accept_burst"] != SourceDefaults ||
		d.Rejecting || d.LastRejected != nil {
		t.Fatalf("dump at start: %+v", d)
	}

	// A push merged over the base: only what it changes is attributed to xds.
	push := Merge(base.Settings, &sg.Settings{Admission: &sg.Admission{AcceptBurst: proto.Int32(900)},
		Hold: &sg.Hold{Timeout: dur(5 * time.Second)}}) // same value as the file
	if err := st.Update(push, "v1", SourceXDS, nil); err != nil {
		t.Fatal(err)
	}
	d = dump(t, st)
	if d.Source != SourceXDS || d.FieldSources["admission.accept_burst"] != SourceXDS ||
		d.FieldSources["hold.timeout"] != SourceFile || d.FieldSources["upstream.connections"] != SourceFlag {
		t.Fatalf("dump after push: %+v", d)
	}

	rejecting := func() float64 { return testutil.ToFloat64(st.rejGauge) }
	if rejecting() != 0 {
		t.Fatal("rejecting before any NACK")
	}
	st.XDSResult("v2", Problems{{Field: "keepalive.upstream_interval", Message: "-1s is negative; must be between 1s and 1h"}})
	d = dump(t, st)
	if !d.Rejecting || d.LastRejected == nil || d.LastRejected.Version != "v2" || d.LastRejected.Source != SourceXDS ||
		!strings.Contains(d.LastRejected.Error, "keepalive.upstream_interval: -1s is negative") || d.Version != "v1" {
		t.Fatalf("dump after NACK: %+v", d)
	}
	if rejecting() != 1 {
		t.Fatal("stormgate_xds_rejecting not 1 after a NACK")
	}
	// The control plane goes back to the running version: no longer rejecting;
	// the rejection stays on record.
	st.XDSResult("v1", nil)
	if d = dump(t, st); d.Rejecting || d.LastRejected.Version != "v2" || rejecting() != 0 {
		t.Fatalf("dump after the control plane reverted: %+v", d)
	}
	// A file reload that fails is recorded but is not an xDS rejection.
	st.Reject("abc123", SourceFile, Problems{{Field: "hold.timeout", Message: "too large"}})
	if d = dump(t, st); d.Rejecting || d.LastRejected.Source != SourceFile || rejecting() != 0 {
		t.Fatalf("dump after a rejected file: %+v", d)
	}
	// Another NACK, then an applied push ends it.
	st.XDSResult("v3", Problems{{Field: "x", Message: "bad"}})
	if err := st.Update(Merge(push, interval(7*time.Second)), "v4", SourceXDS, nil); err != nil {
		t.Fatal(err)
	}
	if d = dump(t, st); d.Rejecting || rejecting() != 0 || d.FieldSources["keepalive.upstream_interval"] != SourceXDS {
		t.Fatalf("dump after a good push: %+v", d)
	}

	// Rebase (SIGHUP re-read the file): new base, new sources.
	nb := MergeLayers("s.yaml", Layer{SourceDefaults, Defaults()}, Layer{SourceFile, interval(9 * time.Second)})
	if err := st.Rebase(nb, Version(nb.Settings), SourceFile, nil); err != nil {
		t.Fatal(err)
	}
	if d = dump(t, st); d.Source != SourceFile || d.FieldSources["keepalive.upstream_interval"] != SourceFile ||
		d.FieldSources["hold.timeout"] != SourceDefaults {
		t.Fatalf("dump after rebase: %+v", d)
	}
	if err := st.Rebase(MergeLayers("", Layer{SourceDefaults, WithDefaults(&sg.Settings{Listener: &sg.Listener{Address: proto.String("0.0.0.0:1")}})}), "x", SourceFile, nil); err == nil {
		t.Fatal("rebase changed listener.address live")
	}
}
