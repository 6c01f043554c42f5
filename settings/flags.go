package settings

import (
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// RunFlag is a `sidecar run` flag that sets one setting. RunFlags is the one
// table of them: cmd/sidecar defines its flags from it (each flag's default is
// its setting's in Defaults), and docs/configuration.md lists it. Any other
// setting is reached with --set PATH=VALUE.
type RunFlag struct {
	Name  string // without the dashes: "listen"
	Path  string // the setting: "listener.address"
	Usage string // what --help says, before the setting's path and default
}

// RunFlags are the flags of `sidecar run` that set one setting each.
var RunFlags = []RunFlag{
	{"listen", "listener.address", "address consumers connect to"},
	{"transparent", "listener.transparent", "accept iptables-REDIRECTed connections; upstream is 127.0.0.1:<original port>"},
	{"inbound-ports", "listener.inbound_ports", "transparent mode: provider ports Stormgate may forward to, comma-separated"},
	{"upstream", "upstream.address", "provider address"},
	{"upstream-conns", "upstream.connections", "connections to the provider"},
	{"upstream-protocol", "upstream.protocol", "what the provider speaks: dubbo, triple or both"},
	{"log-level", "log.level", "debug, info, warn or error"},
	{"log-format", "log.format", "json or console"},
}

// Kind is the flag's type as --help prints it: "bool", "int" or "string" (a
// list is written comma-separated).
func (f RunFlag) Kind() string {
	fd := fieldDesc(f.Path)
	switch {
	case fd.IsList():
		return "string"
	case fd.Kind() == protoreflect.BoolKind:
		return "bool"
	case fd.Kind() == protoreflect.Int32Kind || fd.Kind() == protoreflect.Int64Kind:
		return "int"
	}
	return "string"
}

// Default is the setting's default (Defaults) as the flag is written: a list
// comma-separated.
func (f RunFlag) Default() string {
	v := Shown(Defaults(), f.Path)
	if fieldDesc(f.Path).IsList() {
		v = strings.ReplaceAll(strings.Trim(v, "[]"), ", ", ",")
	}
	return v
}
