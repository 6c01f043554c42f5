package settings

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Update checks a change once, lets the stages commit it, and only then swaps: a refused
// change (invalid, not live, or refused by a stage) reaches no stage after the refusal and
// changes nothing.
func TestStoreUpdateCommitAndDump(t *testing.T) {
	reg := prometheus.NewRegistry()
	st, err := NewStore(Defaults(), "v0", SourceDefaults, reg)
	if err != nil {
		t.Fatal(err)
	}
	commits := 0
	commit := func() error { commits++; return nil }

	next := WithDefaults(interval(2 * time.Second))
	if err := st.Update(next, "v1", SourceXDS, commit); err != nil || commits != 1 {
		t.Fatalf("update: %v, %d commits", err, commits)
	}
	if a := st.Load(); a.Version != "v1" || a.Source != SourceXDS || !proto.Equal(a.Settings, next) {
		t.Fatalf("active %+v", a)
	}
	if got := testutil.ToFloat64(st.info.WithLabelValues("v1", SourceXDS)); got != 1 {
		t.Fatalf("config_info{v1,xds}=%v", got)
	}
	if n := testutil.CollectAndCount(st.info); n != 1 {
		t.Fatalf("config_info must have one series, has %d", n)
	}

	// Refused updates change nothing and reach no stage; every problem is named at once.
	bad := WithDefaults(&sg.Settings{Listener: &sg.Listener{Address: proto.String("0.0.0.0:1")},
		Keepalive: &sg.Keepalive{UpstreamInterval: dur(-time.Second)}})
	var ps Problems
	if err := st.Update(bad, "v2", SourceXDS, commit); !errors.As(err, &ps) || len(ps) != 2 ||
		ps[0].Field != "keepalive.upstream_interval" || ps[1].Field != "listener.address" {
		t.Fatalf("want keepalive.upstream_interval and listener.address refused, got %v", err)
	}
	if err := st.Update(WithDefaults(interval(3*time.Second)), "v3", SourceXDS, func() error { return errors.New("stage says no") }); err == nil ||
		err.Error() != "stage says no" {
		t.Fatalf("a stage's refusal: %v", err)
	}
	if st.Load().Version != "v1" || commits != 1 {
		t.Fatalf("refused updates changed the store (%s) or reached the stages (%d commits)", st.Load().Version, commits)
	}

	rec := httptest.NewRecorder()
	st.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/config_dump", nil))
	var dump struct {
		Version  string                    `json:"version"`
		Source   string                    `json:"source"`
		Settings map[string]map[string]any `json:"settings"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &dump); err != nil {
		t.Fatalf("%v\n%s", err, rec.Body)
	}
	if dump.Version != "v1" || dump.Source != "xds" || dump.Settings["keepalive"]["upstream_interval"] != "2s" ||
		dump.Settings["hold"]["max_bytes"] != float64(64<<20) || dump.Settings["drain"]["readonly_policy"] != "HOLD" {
		t.Fatalf("config_dump: %s", rec.Body)
	}
	if n := len(dump.Settings); n != 11 || dump.Settings["http2"]["initial_window_size"] != float64(65535) {
		t.Fatalf("config_dump has %d sections (http2: %v), want 11 with http2", n, dump.Settings["http2"])
	}

	rec = httptest.NewRecorder()
	st.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/config_dump?format=yaml", nil))
	back, err := ParseYAML(rec.Body.Bytes())
	if err != nil || !proto.Equal(back, next) {
		t.Fatalf("yaml dump does not load back: %v\n%s", err, rec.Body)
	}
	rec = httptest.NewRecorder()
	st.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/config_dump", strings.NewReader("")))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %d", rec.Code)
	}
}

func TestNewStoreRejectsInvalid(t *testing.T) {
	if _, err := NewStore(&sg.Settings{}, "v", SourceFile, nil); err == nil {
		t.Fatal("empty settings accepted")
	}
}

// /config_dump shows the log level in force: after POST /logging changed it, the
// changed level from source "admin", not the settings' value from where it came.
func TestConfigDumpShowsTheLiveLogLevel(t *testing.T) {
	st, err := NewStore(Defaults(), "v0", SourceDefaults, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	live := "info"
	st.SetLiveLogLevel(func() string { return live })
	dump := func() (level, source string) {
		rec := httptest.NewRecorder()
		st.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/config_dump", nil))
		var d struct {
			Sources  map[string]string         `json:"field_sources"`
			Settings map[string]map[string]any `json:"settings"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
			t.Fatal(err)
		}
		level, _ = d.Settings["log"]["level"].(string)
		return level, d.Sources["log.level"]
	}
	if lv, src := dump(); lv != "info" || src != SourceDefaults {
		t.Fatalf("before: log.level %q from %q", lv, src)
	}
	live = "debug"
	if lv, src := dump(); lv != "debug" || src != SourceAdmin {
		t.Fatalf("after POST /logging?level=debug: log.level %q from %q", lv, src)
	}
	if st.Load().Settings.GetLog().GetLevel() != "info" {
		t.Fatal("the stored settings changed")
	}
}
