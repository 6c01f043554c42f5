package settings

import (
	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// fixedFields cannot change while the sidecar runs, with the reason a push
// that changes them is refused.
var fixedFields = map[string]bool{
	"listener.address":     true,
	"listener.transparent": true,
	"upstream.address":     true,
	"log.format":           true,
}

var fixedReasons = map[string]string{
	"listener.address":     "the listening socket is bound once at start and consumers are connected to it",
	"listener.transparent": "transparent mode decides how every connection finds its upstream and is set up with iptables at start",
	"upstream.address":     "consumers hold requests in flight on connections to this provider; run one sidecar per provider",
	"log.format":           "the logger is built once at start",
}

// FixedReason says why the field at path cannot change while the sidecar
// runs, or "" when it can.
func FixedReason(path string) string { return fixedReasons[path] }

// CheckLive returns nil when next can replace prev on a running sidecar, or a
// Problems naming each field that cannot change live, both values and why
// (restart the sidecar to change it). prev nil means nothing runs yet.
func CheckLive(prev, next *sg.Settings) error {
	if prev == nil || next == nil {
		return nil
	}
	var ps Problems
	for _, r := range fieldRules {
		if !fixedFields[r.path] {
			continue
		}
		a, aok := lookup(prev.ProtoReflect(), r.path)
		b, bok := lookup(next.ProtoReflect(), r.path)
		if aok == bok && (!aok || a.Equal(b)) {
			continue
		}
		fd := fieldDesc(r.path)
		from, to := "unset", "unset"
		if aok {
			from = formatValue(fd, a)
		}
		if bok {
			to = formatValue(fd, b)
		}
		ps = append(ps, Problem{Field: r.path, Message: "cannot change live (" + from + " -> " + to + "): " +
			fixedReasons[r.path] + "; restart the sidecar to change it"})
	}
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// Equal reports whether two settings are the same value.
func Equal(a, b *sg.Settings) bool { return proto.Equal(a, b) }
