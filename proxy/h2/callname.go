package h2

import "unicode/utf8"

// Headers a Triple consumer sends to name the service's group and version (dubbo-go v3.3.0's
// triple_protocol: applyGroupVersionHeaders on the client, the handler's implementation lookup on the
// server; Java's Triple sends the same). A plain gRPC client sends neither.
const (
	HeaderServiceGroup   = "tri-service-group"
	HeaderServiceVersion = "tri-service-version"
)

// MaxNameLen bounds each name CallOf returns, in bytes, as dubbo.MaxNameLen does for Dubbo 2.
const MaxNameLen = 255

// Call is what a request calls, read from its head: the service and method of its :path
// ("/<service>/<method>": for Triple the service is the Java interface, for gRPC package.Service) and
// the group and version of Triple's headers. Each is a substring of a decoded header value (valid as
// long as the fields are), at most MaxNameLen bytes of printable UTF-8, so it can be a label value as
// it is. Group and Version are empty when the request names none; a version "0.0.0" counts as none, as
// Dubbo's providers treat it.
type Call struct {
	Service, Version, Group, Method string
}

// defaultVersion is Dubbo's "no version".
const defaultVersion = "0.0.0"

// CallOf reads what a request head calls. It reports false for a :path of any other shape than
// ServiceMethod's, or a name over MaxNameLen bytes or holding a control character or invalid UTF-8
// (the request is then counted as unknown; it is forwarded as always). A group or version that breaks
// the same rules makes the whole call unknown too: a label must never carry it. It never allocates.
func CallOf(fields []HeaderField) (c Call, ok bool) {
	for _, f := range fields {
		switch f.Name {
		case HeaderPath:
			if c.Service, c.Method, ok = ServiceMethod(f.Value); !ok {
				return Call{}, false
			}
		case HeaderServiceGroup:
			c.Group = f.Value
		case HeaderServiceVersion:
			c.Version = f.Value
		}
	}
	if c.Version == defaultVersion {
		c.Version = ""
	}
	if !ok || !isName(c.Service) || !isName(c.Method) || !isName(c.Group) || !isName(c.Version) {
		return Call{}, false
	}
	return c, true
}

// isName reports whether s is at most MaxNameLen bytes of printable UTF-8: no C0 or C1 control
// character, no DEL, no invalid encoding.
func isName(s string) bool {
	if len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || r < 0xa0 {
			return false
		}
		i += size
	}
	return true
}
