package main

import (
	"strings"
	"testing"

	"github.com/stormgate/stormgate/settings"
)

// settingsFrom parses `sidecar run` args and builds the settings as run does.
func settingsFrom(t *testing.T, args ...string) (settings.Layered, error) {
	t.Helper()
	var f runFlags
	cmd := runCmd(&f)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return buildSettings(cmd, f)
}

// --set reaches any setting by its path, with the file's decoder (units, any-case enums), in the
// flags' layer: over the file, attributed to "flag".
func TestRunSetFlag(t *testing.T) {
	l, err := settingsFrom(t, "--upstream", "127.0.0.1:20880", "--set", "hold.timeout=10s", "--set", "limits.max_frame_bytes=16MiB",
		"--set", "drain.readonly_policy=propagate", "--log-level", "WARN", "--listen", "[::]:20881", "--log-format", "Console")
	if err != nil {
		t.Fatal(err)
	}
	s := l.Settings
	if s.GetHold().GetTimeout().AsDuration().String() != "10s" || s.GetLimits().GetMaxFrameBytes() != 16<<20 ||
		s.GetDrain().GetReadonlyPolicy().String() != "PROPAGATE" || s.GetLog().GetLevel() != "warn" || s.GetLog().GetFormat() != "console" || s.GetListener().GetAddress() != "[::]:20881" ||
		l.Sources["hold.timeout"] != settings.SourceFlag || l.Sources["hold.max_requests"] != settings.SourceDefaults {
		t.Fatalf("settings %v, sources %v", s, l.Sources)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "hold.timout=10s"}, "\n  hold.timout: unknown field; did you mean timeout?"},
		{[]string{"--set", "hold.timeout"}, `--set "hold.timeout": want PATH=VALUE`},
		{[]string{"--set", "hold.timeout=2h"}, "hold.timeout: 2h is too large; must be between 0s and 1h"},
		{[]string{"--upstream-conns", "2", "--set", "upstream.connections=3"}, "upstream.connections: set twice"},
		{[]string{"--inbound-ports", "20880,x"}, "--inbound-ports: "},
	} {
		_, err := settingsFrom(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

// Each flag of settings.RunFlags sets its setting and nothing else, attributed to "flag"; given
// its own default (what --help shows), it reads back the value of settings.Defaults.
func TestRunFlagsSetTheirSetting(t *testing.T) {
	for _, f := range settings.RunFlags {
		l, err := settingsFrom(t, "--"+f.Name+"="+f.Default())
		if err != nil {
			t.Errorf("--%s=%s: %v", f.Name, f.Default(), err)
			continue
		}
		if got := fieldsFrom(l.Sources, settings.SourceFlag); len(got) != 1 || got[0] != f.Path {
			t.Errorf("--%s sets %v, want [%s]", f.Name, got, f.Path)
		}
		if !settings.SameAt(l.Settings, settings.Defaults(), f.Path) {
			t.Errorf("--%s=%s: %s = %s, want the default %s", f.Name, f.Default(), f.Path,
				settings.Shown(l.Settings, f.Path), settings.Shown(settings.Defaults(), f.Path))
		}
	}
	if l, err := settingsFrom(t, "--transparent", "--inbound-ports", "20880, 20882"); err != nil ||
		!l.Settings.GetListener().GetTransparent() || settings.Shown(l.Settings, "listener.inbound_ports") != "[20880, 20882]" {
		t.Errorf("--transparent --inbound-ports 20880,20882: %v %v", l.Settings.GetListener(), err)
	}
}
