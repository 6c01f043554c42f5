package proxy_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// otherStages are the live durations that do not reach the proxy, and where the live
// rule is kept for them.
var otherStages = map[string]string{
	"admission.max_wait":           "admission.Admitter.Update re-paces the connections already waiting (admission tests)",
	"admission.tcp_keepalive_idle": "a socket option set on each connection as it is accepted: no wait runs on it",
	"drain.min_duration":           "read when a drain of Stormgate starts (cmd/sidecar)",
}

// TestEveryLiveDurationIsRearmed is the live rule (issue 30 item 4) over the whole
// settings schema: every duration setting that may change live either bounds no
// running wait, or each wait it bounds ends by the new value when it is lowered
// (proxy/rearm.go). A new duration setting fails here until it has an entry.
func TestEveryLiveDurationIsRearmed(t *testing.T) {
	base := settings.Defaults()
	for _, f := range settings.Fields() {
		fd := leafField(t, f.Path)
		if !f.Live || fd.Kind() != protoreflect.MessageKind || fd.Message().FullName() != "google.protobuf.Duration" {
			continue
		}
		t.Run(f.Path, func(t *testing.T) {
			field := proxyFieldOf(t, base, f.Path)
			if field == "" {
				if why, ok := otherStages[f.Path]; ok {
					t.Skip("not the proxy's: " + why)
				}
				t.Fatalf("a live duration that reaches no proxy field and is not in otherStages")
			}
			probe, noWait, ok := proxy.LiveDurationProbe(field)
			switch {
			case !ok:
				t.Fatalf("proxy.Config.%s has no entry in proxy/rearm_test.go's liveDurations: say how a change "+
					"reaches the waits it bounds, with a probe", field)
			case probe == nil:
				t.Skip("no wait runs on it: " + noWait)
			default:
				probe(t)
			}
		})
	}
}

// leafField is the descriptor of the schema field at path.
func leafField(t *testing.T, path string) protoreflect.FieldDescriptor {
	md := (&sg.Settings{}).ProtoReflect().Descriptor()
	parts := strings.Split(path, ".")
	for i, p := range parts {
		fd := md.Fields().ByName(protoreflect.Name(p))
		if fd == nil {
			t.Fatalf("%s: no field %q in the schema", path, p)
		}
		if i == len(parts)-1 {
			return fd
		}
		md = fd.Message()
	}
	return nil
}

// proxyFieldOf sets the duration at path to other valid values until one changes
// settings.ProxyConfig, and returns the path of the Config field it changed ("" when
// none does: the setting is another stage's).
func proxyFieldOf(t *testing.T, base *sg.Settings, path string) string {
	parts := strings.Split(path, ".")
	for _, d := range []time.Duration{3 * time.Second, 7 * time.Second, 100 * time.Millisecond, 0} {
		s := settings.Defaults()
		msg := s.ProtoReflect()
		for _, p := range parts[:len(parts)-1] {
			msg = msg.Mutable(msg.Descriptor().Fields().ByName(protoreflect.Name(p))).Message()
		}
		leaf := msg.Descriptor().Fields().ByName(protoreflect.Name(parts[len(parts)-1]))
		msg.Set(leaf, protoreflect.ValueOfMessage(durationpb.New(d).ProtoReflect()))
		if settings.Validate(s) != nil || settings.Equal(s, base) {
			continue
		}
		if changed := diffFields(reflect.ValueOf(settings.ProxyConfig(base)), reflect.ValueOf(settings.ProxyConfig(s)), ""); len(changed) > 0 {
			if len(changed) > 1 {
				t.Fatalf("%s changed several proxy fields: %v", path, changed)
			}
			return changed[0]
		}
		return ""
	}
	t.Fatalf("%s: found no valid value other than the default to try", path)
	return ""
}

// diffFields lists the paths of the struct fields that differ between a and b.
func diffFields(a, b reflect.Value, prefix string) []string {
	var out []string
	for i := range a.NumField() {
		name := prefix + a.Type().Field(i).Name
		if a.Field(i).Kind() == reflect.Struct {
			out = append(out, diffFields(a.Field(i), b.Field(i), name+".")...)
		} else if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, name)
		}
	}
	return out
}
