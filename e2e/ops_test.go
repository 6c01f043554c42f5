package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// provenance is the part of /config_dump that says where settings came from.
type provenance struct {
	Version      string              `json:"version"`
	Source       string              `json:"source"`
	File         string              `json:"file"`
	Rejecting    bool                `json:"rejecting"`
	LastRejected *settings.Rejection `json:"last_rejected"`
	FieldSources map[string]string   `json:"field_sources"`
}

func (s *sidecar) provenance(t *testing.T) provenance {
	t.Helper()
	resp, err := s.http.Get("http://" + s.admin + "/config_dump")
	if err != nil {
		t.Fatalf("config_dump: %v", err)
	}
	defer resp.Body.Close()
	var p provenance
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatalf("config_dump: %v", err)
	}
	return p
}

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, x := range l {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// SIGHUP re-reads --config and applies it live, like an xDS push: a good file
// changes the running settings (seen in /config_dump, in the admission burst
// metric, and in a "settings applied" line listing each change old -> new);
// a bad file changes nothing and is logged, NACK-like, with every problem.
func TestOpsSIGHUPReloadsConfig(t *testing.T) {
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "admission:\n  accept_burst: 500\n", 4)
	p := sc.provenance(t)
	if p.Source != settings.SourceFile || p.File != sc.configPath || p.FieldSources["admission.accept_burst"] != settings.SourceFile ||
		p.FieldSources["upstream.address"] != settings.SourceFlag || p.FieldSources["hold.timeout"] != settings.SourceDefaults {
		t.Fatalf("provenance at start: %+v", p)
	}
	// The start-up line and /config_dump say the same (issue 24: "flag" in one, "file" in the other).
	if started := sc.jsonLines("stormgate started"); len(started) != 1 || started[0]["settings_source"] != p.Source ||
		!slices.Contains(strs(started[0]["set_by_flags"]), "upstream.address") {
		t.Errorf("start-up line %v, /config_dump source %q", started, p.Source)
	}

	writeFileAtomic(t, sc.configPath, "admission:\n  accept_burst: 700\nhold:\n  timeout: 4s\n")
	if err := sc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	sc.waitMetric(t, 5*time.Second, "stormgate_admission_burst", func(v float64) bool { return v == 700 })
	var applied []string
	if !poll(5*time.Second, func() bool {
		for _, m := range sc.jsonLines("settings applied") {
			if m["source"] == settings.SourceFile {
				applied = strs(m["changed"])
				return true
			}
		}
		return false
	}) {
		t.Fatal(`no "settings applied" line after SIGHUP`)
	}
	if want := []string{"admission.accept_burst: 500 -> 700", "hold.timeout: 3s -> 4s"}; !slices.Equal(applied, want) {
		t.Errorf("settings applied: changed %q, want %q", applied, want)
	}
	p = sc.provenance(t)
	if p.Source != settings.SourceFile || p.FieldSources["hold.timeout"] != settings.SourceFile || p.FieldSources["upstream.address"] != settings.SourceFlag {
		t.Errorf("provenance after reload: %+v", p)
	}
	good := p.Version

	// A bad file: a range error and a field that cannot change live. Nothing applies.
	writeFileAtomic(t, sc.configPath, "admission:\n  accept_burst: 0\nlog:\n  format: console\n")
	if err := sc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var rejected map[string]any
	if !poll(5*time.Second, func() bool {
		if l := sc.jsonLines("settings file rejected; keeping the running settings"); len(l) > 0 {
			rejected = l[0]
			return true
		}
		return false
	}) {
		t.Fatal("no rejection logged for a bad file")
	}
	problems := strings.Join(strs(rejected["problems"]), "\n")
	t.Logf("rejected: %s", problems)
	if !strings.Contains(problems, "admission.accept_burst: 0 is too small") || !strings.Contains(problems, "log.format: cannot change live") ||
		rejected["level"] != "warn" || rejected["running_version"] != good || rejected["file"] != sc.configPath || rejected["version"] == "" {
		t.Errorf("rejection log %v", rejected)
	}
	p = sc.provenance(t)
	if p.Version != good || p.LastRejected == nil || p.LastRejected.Source != settings.SourceFile || p.Rejecting {
		t.Errorf("after a rejected file: %+v", p)
	}
	if v := sc.metric(t, "stormgate_admission_burst"); v != 700 {
		t.Errorf("a rejected file changed the burst to %v", v)
	}
	if err := os.Remove(sc.configPath); err != nil {
		t.Fatal(err)
	}
	if err := sc.Signal(syscall.SIGHUP); err != nil { // a missing file is rejected too
		t.Fatal(err)
	}
	if !poll(5*time.Second, func() bool { return len(sc.jsonLines("settings file rejected; keeping the running settings")) == 2 }) {
		t.Fatal("a missing file was not rejected")
	}
	if sc.Exited() {
		t.Fatal("SIGHUP stopped the sidecar")
	}
}

// An xDS NACK sets stormgate_xds_rejecting and shows in /config_dump with the
// rejected version and its error, for as long as the control plane serves
// it; a good version clears it. Each applied push logs what it changed.
func TestOpsXDSRejectingAndProvenance(t *testing.T) {
	const node = "e2e-ops"
	prov := startXDSProvider(t)
	fcp := startXDSFakeCP(t)
	v1 := fcp.push(t, node, &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: durationpb.New(20 * time.Second)}})
	sc := startXDSSidecar(t, prov.Addr(), fcp.addr, node, 4)
	sc.waitXDSApplied(t, 10*time.Second, v1)

	p := sc.provenance(t)
	if p.FieldSources["keepalive.upstream_interval"] != settings.SourceXDS || p.FieldSources["listener.address"] != settings.SourceFlag ||
		p.FieldSources["hold.timeout"] != settings.SourceDefaults || p.Rejecting || p.LastRejected != nil {
		t.Fatalf("provenance after v1: %+v", p)
	}
	if !poll(5*time.Second, func() bool {
		for _, m := range sc.jsonLines("settings applied") {
			if m["version"] == v1 && slices.Equal(strs(m["changed"]), []string{"keepalive.upstream_interval: 30s -> 20s"}) {
				return true
			}
		}
		return false
	}) {
		t.Errorf(`no "settings applied" line for %s listing keepalive.upstream_interval: 30s -> 20s`, v1)
	}
	if v := sc.metric(t, "stormgate_xds_rejecting"); v != 0 {
		t.Fatalf("stormgate_xds_rejecting = %v before any NACK", v)
	}
	if v := sc.metric(t, "stormgate_build_info"); v != 1 {
		t.Errorf("stormgate_build_info = %v", v)
	}

	vBad := fcp.push(t, node, &sg.Settings{Listener: &sg.Listener{Address: proto.String("127.0.0.1:1")}})
	sc.waitMetric(t, 5*time.Second, "stormgate_xds_rejecting", func(v float64) bool { return v == 1 })
	p = sc.provenance(t)
	if !p.Rejecting || p.LastRejected == nil || p.LastRejected.Version != vBad || p.LastRejected.Source != settings.SourceXDS ||
		!strings.Contains(p.LastRejected.Error, "listener.address: cannot change live") || p.Version != v1 {
		t.Fatalf("provenance while rejecting: %+v", p)
	}
	// It stays rejecting while the control plane serves the bad version.
	stays(t, time.Second, "stormgate_xds_rejecting = 1", func() (bool, string) {
		v := sc.metric(t, "stormgate_xds_rejecting")
		return v == 1, fmt.Sprint(v)
	})

	v3 := fcp.push(t, node, &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: durationpb.New(15 * time.Second)}})
	sc.waitXDSApplied(t, 5*time.Second, v3)
	sc.waitMetric(t, 5*time.Second, "stormgate_xds_rejecting", func(v float64) bool { return v == 0 })
	if p = sc.provenance(t); p.Rejecting || p.LastRejected == nil || p.LastRejected.Version != vBad {
		t.Errorf("after a good version: %+v (the last rejection stays on record)", p)
	}
}

// SIGHUP with --xds is refused, and says why.
func TestOpsSIGHUPWithXDSIsRefused(t *testing.T) {
	const node = "e2e-ops-hup"
	prov := startXDSProvider(t)
	fcp := startXDSFakeCP(t)
	v1 := fcp.push(t, node, &sg.Settings{})
	sc := startXDSSidecar(t, prov.Addr(), fcp.addr, node, 0)
	sc.waitXDSApplied(t, 10*time.Second, v1)
	if err := sc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	m := sc.waitJSONLine(t, false, 5*time.Second, "SIGHUP refusal", func(m map[string]any) bool {
		return strings.HasPrefix(fmt.Sprint(m["msg"]), "SIGHUP ignored: with --xds the control plane owns the settings")
	})
	if m["level"] != "warn" {
		t.Errorf("refusal logged at %v", m["level"])
	}
	if sc.Exited() {
		t.Fatal("SIGHUP stopped the sidecar")
	}
}
