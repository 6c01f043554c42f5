package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/stormgate/stormgate/handover"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// The settings in force cross an upgrade as they are: the xDS-pushed value with its
// version and source, each field's source, the base later pushes merge over, and the
// last rejection (what /config_dump shows must not change across the exec).
func TestSettingsCrossTheUpgrade(t *testing.T) {
	file := &sg.Settings{Hold: &sg.Hold{MaxRequests: proto.Int32(77)}}
	flags := &sg.Settings{Upstream: &sg.Upstream{Connections: proto.Int32(2)}}
	base := settings.MergeLayers("/etc/stormgate.yaml", settings.Layer{Source: settings.SourceDefaults, Settings: settings.Defaults()},
		settings.Layer{Source: settings.SourceFile, Settings: file}, settings.Layer{Source: settings.SourceFlag, Settings: flags})
	old, err := settings.NewLayeredStore(base, settings.Version(base.Settings), nil)
	if err != nil {
		t.Fatal(err)
	}
	pushed := proto.Clone(base.Settings).(*sg.Settings)
	pushed.Keepalive.UpstreamMaxMissed = proto.Int32(5)
	if err := old.Update(pushed, "cp-v7", settings.SourceXDS, nil); err != nil {
		t.Fatal(err)
	}
	old.Reject("cp-v8", settings.SourceXDS, errors.New("hold.timeout: 2m is out of range"))

	b, err := encodeSettingsState(old)
	if err != nil {
		t.Fatal(err)
	}
	ss, l, active, err := restoredSettings(b)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := restoredStore(ss, l, active, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a, r := old.Load(), restored.Load()
	if !settings.Equal(a.Settings, r.Settings) || a.Version != r.Version || a.Source != r.Source || a.File != r.File ||
		!reflect.DeepEqual(a.Sources, r.Sources) {
		t.Errorf("settings in force: version %s/%s source %s/%s file %s/%s; sources equal %t",
			a.Version, r.Version, a.Source, r.Source, a.File, r.File, reflect.DeepEqual(a.Sources, r.Sources))
	}
	if got := r.Sources["keepalive.upstream_max_missed"]; got != settings.SourceXDS {
		t.Errorf("pushed field attributed to %q", got)
	}
	if got := r.Sources["hold.max_requests"]; got != settings.SourceFile {
		t.Errorf("file field attributed to %q", got)
	}
	if ob, rb := old.Base(), restored.Base(); !settings.Equal(ob.Settings, rb.Settings) || !reflect.DeepEqual(ob.Sources, rb.Sources) {
		t.Error("the base later pushes merge over changed across the upgrade")
	}
	if rej := restored.LastRejected(); rej == nil || rej.Version != "cp-v8" || !restored.Rejecting() {
		t.Errorf("last rejection %+v, rejecting %t; want cp-v8, still rejecting", rej, restored.Rejecting())
	}
}

// A state whose settings this binary refuses is a restore failure (a rollback), with
// the problem named.
func TestRestoredSettingsRefusesInvalid(t *testing.T) {
	bad := settings.Defaults()
	bad.Upstream.Connections = proto.Int32(500)
	raw, _ := proto.Marshal(bad)
	b, _ := json.Marshal(settingsState{Base: raw, Active: raw, Version: "x", Source: settings.SourceFile})
	if _, _, _, err := restoredSettings(b); err == nil || !strings.Contains(err.Error(), "upstream.connections") {
		t.Fatalf("err %v; want it to name upstream.connections", err)
	}
}

// run --preflight checks the flags and the settings in force given on stdin, binds
// nothing, and prints the report the old process reads.
func TestRunPreflight(t *testing.T) {
	inForce, _ := proto.Marshal(settings.Defaults())
	run := func(stdin []byte, args ...string) (string, error) {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetIn(bytes.NewReader(stdin))
		cmd.SetArgs(append([]string{"run", "--preflight"}, args...))
		err := cmd.Execute()
		return out.String(), err
	}
	out, err := run(inForce, "--listen", "127.0.0.1:1", "--metrics", "127.0.0.1:1", "--admin", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	var rep handover.PreflightReport
	if json.Unmarshal([]byte(strings.TrimSpace(out)), &rep) != nil || rep.Preflight != "ok" || rep.Version != version ||
		rep.Format != handover.Format || !rep.Can(handover.CarriesHTTP2) || !rep.Can(handover.CarriesCompactConsumers) {
		t.Fatalf("report %q", out)
	}
	if _, err := run(nil, "--upstream-conns", "500"); err == nil || !strings.Contains(err.Error(), "upstream.connections") {
		t.Errorf("bad flag: %v", err)
	}
	// Settings in force that this binary refuses: the upgrade must not happen.
	bad := settings.Defaults()
	bad.Hold.Timeout = nil
	bad.Limits.MaxRequestAge.Seconds = 1
	badB, _ := proto.Marshal(bad)
	if _, err := run(badB); err == nil || !strings.Contains(err.Error(), "settings in force") {
		t.Errorf("settings in force invalid here: %v", err)
	}
}

// POST /upgrade refuses what it cannot run, before any preflight; GET reports.
func TestUpgradeEndpointRefuses(t *testing.T) {
	reg := prometheus.NewRegistry()
	draining := false
	u, err := newUpgrader(zap.NewNop(), "", settings.Defaults, func() bool { return draining }, reg)
	if err != nil {
		t.Fatal(err)
	}
	h := u.handler(context.Background())
	post := func(q string) (int, string) {
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, "/upgrade?"+q, nil))
		return rec.Code, rec.Body.String()
	}
	for q, want := range map[string]string{
		"":                              "no binary",
		"binary=sidecar":                "must be absolute",
		"binary=/x&preflight_timeout=x": "preflight_timeout",
		"binary=/x&end_streams=maybe":   "end_streams",
	} {
		if code, body := post(q); code/100 != 4 || !strings.Contains(body, want) {
			t.Errorf("POST /upgrade?%s: %d %s; want a 4xx saying %q", q, code, body, want)
		}
	}
	draining = true
	if code, body := post("binary=/bin/true"); code != http.StatusUnprocessableEntity || !strings.Contains(body, "draining") {
		t.Errorf("while draining: %d %s", code, body)
	}
	u.busy.Store(true)
	if code, _ := post("binary=/bin/true"); code != http.StatusConflict {
		t.Errorf("during an upgrade: %d, want 409", code)
	}
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/upgrade", nil))
	var st upgradeStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Version != version || !st.Upgrading ||
		st.Last == nil || st.Last.Result != resultRefused {
		t.Errorf("GET /upgrade: %s", rec.Body)
	}
	// Every refusal counted (the busy one is not an upgrade).
	if got := counterValue(t, reg, "stormgate_upgrades_total", resultRefused); got != 3 {
		t.Errorf("stormgate_upgrades_total{result=refused} = %v, want 3", got)
	}
}

// With Triple on, a binary that cannot take HTTP/2 connections over (one from before it: its report
// carries nothing) is refused after its preflight, before anything stops: its restore would take the
// HTTP/2 consumers for Dubbo ones and close them. With Dubbo only the same binary is fine.
func TestUpgradeRefusesBinaryWithoutHTTP2(t *testing.T) {
	old := filepath.Join(t.TempDir(), "sidecar-old")
	script := "#!/bin/sh\necho '{\"preflight\":\"ok\",\"version\":\"v0.9\",\"handover_format\":" +
		strconv.Itoa(handover.Format) + "}'\n"
	if err := os.WriteFile(old, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{"triple", "both", "dubbo"} {
		in := settings.Defaults()
		in.Upstream.Protocol = &proto
		u, err := newUpgrader(zap.NewNop(), "", func() *sg.Settings { return in }, func() bool { return false }, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		u.handler(context.Background())(rec, httptest.NewRequest(http.MethodPost, "/upgrade?binary="+old, nil))
		refused := rec.Code == http.StatusUnprocessableEntity && strings.Contains(rec.Body.String(), "cannot take HTTP/2 consumer connections over")
		if refused != (proto != "dubbo") {
			t.Errorf("upstream.protocol %s: %d %s", proto, rec.Code, rec.Body)
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("%s{result=%q} not found", name, result)
	return 0
}

// A sidecar whose upgraded process died after the exec and was restarted (systemd, the kubelet)
// answers with another pid and no outcome: `sidecar upgrade` says so at once instead of waiting out
// --timeout for an outcome that can never come.
func TestUpgradeCommandSeesARestartedSidecar(t *testing.T) {
	posted := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost:
			posted = true
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(upgradeOutcome{ID: "u1", From: "v1", To: "v2", Binary: "/new/sidecar"})
		case !posted:
			_ = json.NewEncoder(w).Encode(upgradeStatus{Version: "v1", PID: 100})
		default: // restarted from the old binary: a new pid, no record of the upgrade
			_ = json.NewEncoder(w).Encode(upgradeStatus{Version: "v1", PID: 200})
		}
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := runUpgrade(&out, upgradeFlags{admin: strings.TrimPrefix(srv.URL, "http://"), timeout: time.Minute,
		preflightTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "a new process (pid 200, was 100") {
		t.Fatalf("err %v", err)
	}
}
