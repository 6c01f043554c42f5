package settings

import (
	"strings"
	"testing"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Assignments (sidecar run --set, inject's settings annotations) go through the file's decoder:
// the same names, types, any-case enums and choices, durations and byte units, the same problems.
func TestParseAssignments(t *testing.T) {
	s, err := ParseAssignments([]Assignment{
		{"hold.timeout", "10s"}, {"limits.max_frame_bytes", "16MiB"}, {"drain.readonly_policy", "propagate"},
		{"log.level", "DEBUG"}, {"listener.inbound_ports", "[20880, 20881]"}, {"admission.accept_rate", "1500"},
		{"admission.per_source_fairness", "false"}, {"upstream.address", "127.0.0.1:20880"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.GetHold().GetTimeout().AsDuration().String() != "10s" || s.GetLimits().GetMaxFrameBytes() != 16<<20 ||
		s.GetDrain().GetReadonlyPolicy() != sg.ReadonlyPolicy_PROPAGATE || s.GetLog().GetLevel() != "debug" ||
		len(s.GetListener().GetInboundPorts()) != 2 || s.GetAdmission().GetAcceptRate() != 1500 ||
		s.GetAdmission().GetPerSourceFairness() || s.GetUpstream().GetAddress() != "127.0.0.1:20880" {
		t.Fatalf("decoded %v", s)
	}
	// Text fields take the value as it is: an IPv6 address is not a YAML list, "0" is a duration.
	s2, err := ParseAssignments([]Assignment{{"listener.address", "[::]:15006"}, {"hold.timeout", "0"}, {"log.format", " JSON "}})
	if err != nil || s2.GetListener().GetAddress() != "[::]:15006" || s2.GetHold().GetTimeout().AsDuration() != 0 || s2.GetLog().GetFormat() != "json" {
		t.Errorf("text values: %v %v", s2, err)
	}
	if got := SetPaths(s); len(got) != 8 || got[0] != "listener.inbound_ports" {
		t.Errorf("SetPaths %q", got)
	}

	for _, c := range []struct {
		as   []Assignment
		want string
	}{
		{[]Assignment{{"hold.timout", "10s"}}, "hold.timout: unknown field; did you mean timeout?"},
		{[]Assignment{{"hld.timeout", "10s"}}, "hld: unknown field; did you mean hold?"},
		{[]Assignment{{"hold.timeout", "10"}}, `hold.timeout: "10" is not a duration like "3s" or "500ms"`},
		{[]Assignment{{"hold.max_bytes", "64MB!"}}, `hold.max_bytes: "64MB!" is not a byte size`},
		{[]Assignment{{"hold.timeout", ""}}, "hold.timeout: no value"},
		{[]Assignment{{"hold..timeout", "1s"}}, "hold..timeout: not a setting path"},
		{[]Assignment{{"hold.timeout", "1s"}, {"hold.timeout", "2s"}}, "hold.timeout: set twice"},
		{[]Assignment{{"hold", "{timeout: 1s}"}, {"hold.timeout", "2s"}}, "hold.timeout: set twice"},
		{[]Assignment{{"hold.timeout", "1s"}, {"hold", "{max_requests: 1}"}}, "hold: set twice"},
		{[]Assignment{{"listener.inbound_ports", "[20880"}}, "listener.inbound_ports: did not find expected"},
		{[]Assignment{{"drain.readonly_policy", "hlod"}}, `drain.readonly_policy: "hlod" is not one of HOLD, PROPAGATE (any case)`},
		{[]Assignment{{"log.level.x", "1"}}, `log.level: a mapping is not a string`},
		{[]Assignment{{"upstream.connections", "four"}}, `upstream.connections: "four" is not a 32-bit integer`},
		{[]Assignment{{"listener.transparent", "off"}}, `listener.transparent: "off" is not true or false`},
	} {
		_, err := ParseAssignments(c.as)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.as, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "(line") {
			t.Errorf("%v: %v names a line, but there is no file", c.as, err)
		}
	}
	if a, ok := ParseAssignment(" hold.timeout =3s=x"); !ok || a.Path != "hold.timeout" || a.Value != "3s=x" {
		t.Errorf("ParseAssignment: %+v %v", a, ok)
	}
	if _, ok := ParseAssignment("hold.timeout"); ok {
		t.Error("ParseAssignment accepted a path without a value")
	}
}
