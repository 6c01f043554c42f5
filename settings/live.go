package settings

import (
	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// FixedReason says why the field at path cannot change while the sidecar
// runs, or "" when it can.
func FixedReason(path string) string {
	r, _ := ruleFor(path)
	return r.restart
}

// CheckLive returns nil when next can replace prev on a running sidecar, or a
// Problems naming each field that cannot change live, both values and why
// (restart the sidecar to change it). prev nil means nothing runs yet.
func CheckLive(prev, next *sg.Settings) error {
	if prev == nil || next == nil {
		return nil
	}
	var ps Problems
	for _, r := range fieldRules {
		if r.restart == live {
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
			r.restart + "; restart the sidecar to change it"})
	}
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// Equal reports whether two settings are the same value.
func Equal(a, b *sg.Settings) bool { return proto.Equal(a, b) }
