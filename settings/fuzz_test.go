package settings

import (
	"os"
	"testing"

	"google.golang.org/protobuf/proto"
)

// FuzzParseYAML: hostile files never panic the loader, and whatever it
// accepts prints back (MarshalYAML) to the same settings.
func FuzzParseYAML(f *testing.F) {
	for _, p := range []string{"../examples/stormgate.yaml", "../examples/control-plane.yaml"} {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{"", "# only a comment\n", "listener: {inbound_ports: [1, 2]}", "hold: {timeout: 1.5s}",
		"keepalive: &a {upstream_interval: 3s}\nlog: *a", "a: [", "drain: {readonly_policy: 2}", "upstream: {connections: 0x10}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseYAML(data)
		if err != nil {
			return
		}
		_ = Validate(WithDefaults(s))
		y, err := MarshalYAML(s)
		if err != nil {
			t.Fatal(err)
		}
		back, err := ParseYAML(y)
		if err != nil {
			t.Fatalf("printed settings do not load: %v\n%s", err, y)
		}
		if !proto.Equal(back, s) {
			t.Fatalf("round trip changed settings:\nin  %v\nout %v\n%s", s, back, y)
		}
	})
}
