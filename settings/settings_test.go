package settings

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// leafPaths walks the schema: every field that is not a group of settings.
func leafPaths(md protoreflect.MessageDescriptor, prefix string) []string {
	var out []string
	for i := 0; i < md.Fields().Len(); i++ {
		fd := md.Fields().Get(i)
		p := join(prefix, string(fd.Name()))
		if fd.Message() != nil && !isAtomic(fd.Message()) && !fd.IsList() {
			out = append(out, leafPaths(fd.Message(), p)...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func TestEveryFieldHasDefaultAndRule(t *testing.T) {
	leaves := leafPaths((&sg.Settings{}).ProtoReflect().Descriptor(), "")
	var ruled []string
	for _, r := range fieldRules {
		ruled = append(ruled, r.path)
	}
	if !slices.Equal(leaves, ruled) {
		t.Fatalf("fieldRules must list every leaf in schema order:\n schema %v\n rules  %v", leaves, ruled)
	}
	d := Defaults().ProtoReflect()
	for _, p := range leaves {
		if _, ok := lookup(d, p); !ok {
			t.Errorf("Defaults() leaves %s unset", p)
		}
	}
	if err := Validate(Defaults()); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, f := range Fields() {
		if f.Help == "" || f.Allowed == "" || f.Default == "" {
			t.Errorf("Fields(): %+v incomplete", f)
		}
	}
}

func TestExampleSettingsFile(t *testing.T) {
	if err := ValidateFile("../examples/stormgate.yaml"); err != nil {
		t.Fatal(err)
	}
	s, err := LoadFile("../examples/stormgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(s, Defaults()) {
		j, _ := MarshalJSON(s)
		t.Fatalf("examples/stormgate.yaml must equal Defaults(); got\n%s", j)
	}
}

func TestValidateNamesFieldAndRange(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(s *sg.Settings)
		field string
		want  string
	}{
		{"negative interval", func(s *sg.Settings) { s.Keepalive.UpstreamInterval = dur(-time.Second) },
			"keepalive.upstream_interval", "keepalive.upstream_interval: -1s is negative; must be between 1s and 1h"},
		{"interval too large", func(s *sg.Settings) { s.Keepalive.UpstreamInterval = dur(2 * time.Hour) },
			"keepalive.upstream_interval", "2h is too large; must be between 1s and 1h"},
		{"idle off is fine", func(s *sg.Settings) { s.Keepalive.DownstreamIdleTimeout = dur(0) }, "", ""},
		{"idle tiny", func(s *sg.Settings) { s.Keepalive.DownstreamIdleTimeout = dur(time.Millisecond) },
			"keepalive.downstream_idle_timeout", "0 (off) or between 1s and 24h"},
		{"no connections", func(s *sg.Settings) { s.Upstream.Connections = proto.Int32(0) },
			"upstream.connections", "0 is too small; must be between 1 and 64"},
		{"rate negative", func(s *sg.Settings) { s.Admission.AcceptRate = proto.Float64(-5) },
			"admission.accept_rate", "-5 is negative; must be between 1 and 1000000"},
		{"jitter", func(s *sg.Settings) { s.Keepalive.UpstreamJitter = proto.Float64(0.9) },
			"keepalive.upstream_jitter", "0.9 is too large"},
		{"bad address", func(s *sg.Settings) { s.Listener.Address = proto.String("20881") },
			"listener.address", `"20881" is not host:port`},
		{"port out of range", func(s *sg.Settings) { s.Upstream.Address = proto.String("127.0.0.1:70000") },
			"upstream.address", "bad port"},
		{"empty upstream", func(s *sg.Settings) { s.Upstream.Address = proto.String("") },
			"upstream.address", "unless listener.transparent"},
		{"empty upstream transparent", func(s *sg.Settings) {
			s.Upstream.Address = proto.String("")
			s.Listener.Transparent = proto.Bool(true)
		}, "", ""},
		{"unspecified policy", func(s *sg.Settings) { s.Drain.ReadonlyPolicy = sg.ReadonlyPolicy_READONLY_POLICY_UNSPECIFIED.Enum() },
			"drain.readonly_policy", "READONLY_POLICY_UNSPECIFIED is not allowed; must be HOLD or PROPAGATE"},
		{"log level", func(s *sg.Settings) { s.Log.Level = proto.String("loud") },
			"log.level", `"loud" is not allowed; must be debug, info, warn or error`},
		{"missing", func(s *sg.Settings) { s.Hold.Timeout = nil }, "hold.timeout", "missing; must be between 0s and 1h"},
		{"backoff order", func(s *sg.Settings) { s.Upstream.BackoffBase = dur(5 * time.Second) },
			"upstream.backoff_max", "below upstream.backoff_base"},
		{"frame cap", func(s *sg.Settings) { s.Limits.MaxFrameBytes = proto.Int32(-1) },
			"limits.max_frame_bytes", "-1 is negative"},
		{"duplicate port", func(s *sg.Settings) { s.Listener.InboundPorts = []int32{20880, 20880} },
			"listener.inbound_ports[1]", "listed twice"},
		// HTTP/2 (issue 26 item 6): RFC 9113's largest window, and no zero that would stall every stream.
		{"window above 2^31-1", func(s *sg.Settings) { s.Http2.InitialWindowSize = proto.Int32(-1 << 31) },
			"http2.initial_window_size", "-2147483648 is negative; must be between 1024 and 2147483647"},
		{"window largest", func(s *sg.Settings) { s.Http2.InitialWindowSize = proto.Int32(1<<31 - 1) }, "", ""},
		{"window zero", func(s *sg.Settings) { s.Http2.InitialWindowSize = proto.Int32(0) },
			"http2.initial_window_size", "0 is too small"},
		{"no streams", func(s *sg.Settings) { s.Http2.MaxConcurrentStreams = proto.Int32(0) },
			"http2.max_concurrent_streams", "0 is too small; must be between 1 and 1000000"},
		{"header list huge", func(s *sg.Settings) { s.Http2.MaxHeaderListSize = proto.Int32(2 << 20) },
			"http2.max_header_list_size", "2097152 is too large; must be between 1024 and 1048576"},
		// Cross-field rules (issue 10 item 6).
		{"hold outlives max age", func(s *sg.Settings) {
			s.Hold.Timeout = dur(time.Minute)
			s.Limits.MaxRequestAge = dur(40 * time.Second)
		},
			"hold.timeout", "below limits.max_request_age"},
		{"hold equal to max age", func(s *sg.Settings) {
			s.Hold.Timeout = dur(40 * time.Second)
			s.Limits.MaxRequestAge = dur(40 * time.Second)
		},
			"hold.timeout", "below limits.max_request_age"},

		{"inbound port is the listener", func(s *sg.Settings) {
			s.Listener.Transparent = proto.Bool(true)
			s.Listener.Address = proto.String("0.0.0.0:15006")
			s.Listener.InboundPorts = []int32{20880, 15006}
		}, "listener.inbound_ports[1]", "is listener.address's own port"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Defaults()
			c.edit(s)
			err := Validate(s)
			if c.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var ps Problems
			if !errors.As(err, &ps) || len(ps) != 1 {
				t.Fatalf("want exactly one problem, got %v", err)
			}
			if ps[0].Field != c.field || !strings.Contains(ps[0].Error(), c.want) {
				t.Fatalf("got %q (field %q), want field %q containing %q", ps[0].Error(), ps[0].Field, c.field, c.want)
			}
		})
	}
}

func TestValidateReportsAllProblems(t *testing.T) {
	s := Defaults()
	s.Keepalive.UpstreamInterval = dur(-time.Second)
	s.Upstream.Connections = proto.Int32(100)
	s.Log.Format = proto.String("xml")
	var ps Problems
	if !errors.As(Validate(s), &ps) || len(ps) != 3 {
		t.Fatalf("want 3 problems, got %v", ps)
	}
}

func TestParseYAMLErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"keepalive:\n  upstream_intervl: 3s\n", "keepalive.upstream_intervl: unknown field; did you mean upstream_interval? (line 2)"},
		{"nope: 1\n", "nope: unknown field (line 1)"},
		{"hold: {timeout: 3}\n", `hold.timeout: "3" is not a duration like "3s" or "500ms" (line 1)`},
		{"hold: {timeout: soon}\n", `hold.timeout: "soon" is not a duration`},
		{"upstream: {connections: four}\n", `upstream.connections: "four" is not a 32-bit integer`},
		{"upstream: {connections: 3000000000}\n", `is not a 32-bit integer`},
		{"listener: {transparent: yes}\n", `listener.transparent: "yes" is not true or false`},
		{"listener: {inbound_ports: 20880}\n", `listener.inbound_ports: must be a list`},
		{"listener: {inbound_ports: [a]}\n", `listener.inbound_ports[0]: "a" is not a 32-bit integer`},
		{"listener: {address: 80}\n", `listener.address: "80" is not a string (quote it)`},
		{"drain: {readonly_policy: holdx}\n", `drain.readonly_policy: "holdx" is not one of HOLD, PROPAGATE (any case)`},
		{"drain: {readonly_policy: READONLY_POLICY_UNSPECIFIED}\n", `is not one of HOLD, PROPAGATE`},
		{"drain: {readonly_policy: readonly_policy_unspecified}\n", `is not one of HOLD, PROPAGATE`},
		{"hold: {max_bytes: 64 MiBs}\n", `hold.max_bytes: "64 MiBs" is not a byte size: a number of bytes, or with a unit: 512KiB, 64MiB, 1GiB`},
		{"hold: {max_bytes: 1.5MiB}\n", `hold.max_bytes: "1.5MiB" is not a byte size`},
		{"hold: {max_bytes: -1MiB}\n", `hold.max_bytes: "-1MiB" is not a byte size`},
		{"hold: {max_bytes: 2GiB}\n", `hold.max_bytes: "2GiB" is not at most 2147483647 bytes (2GiB - 1)`},
		{"hold: {max_requests: 10k}\n", `hold.max_requests: "10k" is not a 32-bit integer`},
		{"log: info\n", "log: must be a mapping of Log fields"},
		{"log: {level: info, level: debug}\n", "log.level: set twice"},
		{"listener: [1]\n", "listener: must be a mapping"},
		{"keepalive: {upstream_interval: [1s]}\n", "keepalive.upstream_interval: a list is not a duration"},
		{"a: [\n", "did not find expected node content"},
	}
	for _, c := range cases {
		_, err := ParseYAML([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}

// Issue 24: enums and fixed string choices in any case, byte sizes with units ("64MiB"), in the
// file as in --set and annotations (the same decoder).
func TestParseYAMLCaseAndUnits(t *testing.T) {
	s, err := ParseYAML([]byte(`
drain: {readonly_policy: propagate}
log: {level: WARN, format: Console}
hold: {max_bytes: 64MiB}
limits: {max_frame_bytes: 8 Mi, max_queued_bytes_per_connection: 512KiB, max_buffered_bytes: 1GB}
upstream: {max_queued_bytes: 8388608}
http2: {initial_window_size: 1MiB, max_header_list_size: 16KiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.GetHttp2().GetInitialWindowSize() != 1<<20 || s.GetHttp2().GetMaxHeaderListSize() != 16<<10 {
		t.Fatalf("HTTP/2 sizes (names ending in _size) decoded %v", s.GetHttp2())
	}
	if s.GetDrain().GetReadonlyPolicy() != sg.ReadonlyPolicy_PROPAGATE || s.GetLog().GetLevel() != "warn" || s.GetLog().GetFormat() != "console" ||
		s.GetHold().GetMaxBytes() != 64<<20 || s.GetLimits().GetMaxFrameBytes() != 8<<20 ||
		s.GetLimits().GetMaxQueuedBytesPerConnection() != 512<<10 || s.GetLimits().GetMaxBufferedBytes() != 1e9 ||
		s.GetUpstream().GetMaxQueuedBytes() != 8<<20 {
		t.Fatalf("decoded %v", s)
	}
	if err := Validate(WithDefaults(s)); err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]int64{"0": 0, "1b": 1, "2K": 2048, "3kib": 3072, "4KB": 4000, "5 MB": 5e6, "1Gi": 1 << 30, "7GB": 7e9} {
		if n, ok := ParseByteSize(in); !ok || n != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{"", "MiB", "1.5K", "-1", "1 TiB", "0x10", "99999999999999999999", "1e3"} {
		if n, ok := ParseByteSize(in); ok {
			t.Errorf("ParseByteSize(%q) = %d, want refused", in, n)
		}
	}
}

func TestParseYAMLAccepts(t *testing.T) {
	s, err := ParseYAML([]byte(`
# partial file
keepalive: {upstream_interval: 500ms, downstream_idle_timeout: 0}
upstream: {backoff_base: 0.05s, backoff_max: 1m30s}
listener: {inbound_ports: [20880, 20881], address: "[::]:20881"}
admission: {accept_rate: 1500}       # int for a double
hold: ~                               # null = unset
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.GetKeepalive().GetUpstreamInterval().AsDuration(); got != 500*time.Millisecond {
		t.Errorf("interval %v", got)
	}
	if s.GetKeepalive().GetDownstreamIdleTimeout() == nil || s.GetKeepalive().GetDownstreamIdleTimeout().AsDuration() != 0 {
		t.Errorf("bare 0 duration must be set to 0")
	}
	if got := s.GetUpstream().GetBackoffMax().AsDuration(); got != 90*time.Second {
		t.Errorf("backoff_max %v", got)
	}
	if s.Hold != nil || s.Upstream.Connections != nil {
		t.Errorf("unset fields must stay unset")
	}
	if got := s.GetAdmission().GetAcceptRate(); got != 1500 {
		t.Errorf("accept_rate %v", got)
	}
	// upstream_interval 500ms is below the 1s minimum: Validate (not the loader) says so.
	if err := Validate(WithDefaults(s)); err == nil || !strings.Contains(err.Error(), "keepalive.upstream_interval: 500ms is too small") {
		t.Errorf("validate: %v", err)
	}
}

func TestMerge(t *testing.T) {
	base := Defaults()
	overlay := &sg.Settings{
		Keepalive: &sg.Keepalive{UpstreamInterval: dur(5 * time.Second)},
		Listener:  &sg.Listener{InboundPorts: []int32{1, 2}},
		Admission: &sg.Admission{PerSourceFairness: proto.Bool(false), TcpFastopen: proto.Int32(0)},
	}
	m := Merge(base, overlay)
	if m.Keepalive.UpstreamInterval.AsDuration() != 5*time.Second || m.Keepalive.UpstreamJitter == nil {
		t.Errorf("keepalive merge: %v", m.Keepalive)
	}
	if !slices.Equal(m.Listener.InboundPorts, []int32{1, 2}) {
		t.Errorf("lists must replace, got %v", m.Listener.InboundPorts)
	}
	if m.Admission.GetPerSourceFairness() || m.Admission.TcpFastopen == nil || m.Admission.GetTcpFastopen() != 0 {
		t.Errorf("explicit false/0 must override: %v", m.Admission)
	}
	if !proto.Equal(base, Defaults()) {
		t.Errorf("Merge modified base")
	}
	overlay.Keepalive.UpstreamInterval.Seconds = 99
	if m.Keepalive.UpstreamInterval.AsDuration() != 5*time.Second {
		t.Errorf("Merge aliased overlay's duration")
	}
	if !proto.Equal(Merge(nil, base), base) || !proto.Equal(Merge(base, nil), base) {
		t.Errorf("nil handling")
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	s := Defaults()
	s.Upstream.BackoffBase = dur(50 * time.Millisecond)
	y, err := MarshalYAML(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseYAML(y)
	if err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	if !proto.Equal(back, s) {
		t.Fatalf("YAML round trip changed settings:\n%s", y)
	}
	j, err := MarshalJSON(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"upstream_interval": "30s"`, `"readonly_policy": "HOLD"`, `"max_queued_bytes_per_connection": 4194304`, `"inbound_ports": [`} {
		if !strings.Contains(string(j), want) {
			t.Errorf("JSON lacks %s:\n%s", want, j)
		}
	}
	if Version(s) != Version(Defaults()) || Version(s) == Version(Merge(s, &sg.Settings{Log: &sg.Log{Level: proto.String("debug")}})) {
		t.Errorf("Version must be a content hash")
	}
}

func TestCheckLive(t *testing.T) {
	a := Defaults()
	b := Merge(a, &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: dur(time.Second)}, Listener: &sg.Listener{Backlog: proto.Int32(128)}})
	if err := CheckLive(a, b); err != nil {
		t.Fatalf("live change refused: %v", err)
	}
	c := Merge(a, &sg.Settings{Listener: &sg.Listener{Address: proto.String("0.0.0.0:20999"), Transparent: proto.Bool(true)}})
	var ps Problems
	if !errors.As(CheckLive(a, c), &ps) || len(ps) != 2 {
		t.Fatalf("want 2 problems, got %v", ps)
	}
	if want := "listener.address: cannot change live (0.0.0.0:20881 -> 0.0.0.0:20999)"; !strings.HasPrefix(ps[0].Error(), want) {
		t.Errorf("got %q want prefix %q", ps[0].Error(), want)
	}
	if ps[1].Field != "listener.transparent" || !strings.Contains(ps[1].Message, "restart") {
		t.Errorf("got %v", ps[1])
	}
}

func TestValidateFileEdgeCases(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		writeFile(t, p, body)
		return p
	}
	for _, ok := range []string{"", "# only comments\n", "---\n", "{}\n"} {
		if err := ValidateFile(write("ok.yaml", ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	err := ValidateFile(write("bad.yaml", "log:\n  level: info\nkeepalive:\n  upstream_interval: -1s\n"))
	if err == nil || err.Error() != "keepalive.upstream_interval: -1s is negative; must be between 1s and 1h (line 4)" {
		t.Errorf("got %v", err)
	}
	if err := ValidateFile(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Errorf("missing file accepted")
	}
}
