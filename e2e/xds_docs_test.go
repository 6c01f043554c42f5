package e2e

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/stormgate/stormgate/xds"
	sg "github.com/stormgate/stormgate/xds/stormgatev1"
)

// The usual golden-file flag: `go test ./e2e -run TestXDSConfigurationDocs -update`.
var xdsUpdateDocs = flag.Bool("update", false, "rewrite docs/configuration.md from xds.Fields()")

// xdsRestartOnly lists fields that a running sidecar refuses to change (the push
// is NACKed, naming the field; TestXDSBadPushNACKed proves it) although
// xds.Fields() reports them live: the proxy refuses upstream.address, and the
// sidecar refuses log.format (its logger is built once). Remove an entry once
// xds lists the field as fixed itself.
var xdsRestartOnly = map[string]bool{}

// xdsSections describes each top-level section of the schema, in the docs.
var xdsSections = map[string]string{
	"listener": "The consumer-facing socket.",
	"admission": "Connection storms: accepted connections are admitted into the event loop by a token bucket; the rest wait, accepted, in a bounded queue. " +
		"`tcp_fastopen` is off by default: Dubbo consumers (Java NIO or Netty, dubbo-go) do not send TCP Fast Open SYNs, so a listener-side queue buys them nothing, " +
		"and it needs the server bit of `net.ipv4.tcp_fastopen`, which stock kernels do not set (the sidecar warns when it is on and the kernel ignores it).",
	"upstream":  "The provider: M connections, reconnect backoff, warm-up.",
	"hold":      "Requests waiting while no upstream connection is usable (provider restarting).",
	"keepalive": "Idle consumers, and Stormgate's own heartbeats on upstream connections.",
	"limits":    "Per-frame and per-consumer limits.",
	"drain":     "Provider READONLY events, and the sidecar's own graceful drain.",
	"log":       "Logging.",
}

// xdsFlags maps the `sidecar run` flags that set a field (checked against
// `sidecar run --help`).
var xdsFlags = []struct{ flag, field string }{
	{"--listen", "listener.address"},
	{"--transparent", "listener.transparent"},
	{"--upstream", "upstream.address"},
	{"--upstream-conns", "upstream.connections"},
	{"--log-level", "log.level"},
	{"--log-format", "log.format"},
}

// TestXDSConfigurationDocs keeps docs/configuration.md equal to what
// xds.Fields() and xds.Defaults() say (issue 5, acceptance 6: every setting
// with its meaning, default, range, and whether it is live).
func TestXDSConfigurationDocs(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Every leaf of the schema is documented.
	fields := map[string]xds.FieldInfo{}
	for _, f := range xds.Fields() {
		fields[f.Path] = f
	}
	for _, leaf := range xdsLeaves((&sg.Settings{}).ProtoReflect().Descriptor(), "") {
		if _, ok := fields[leaf]; !ok {
			t.Errorf("setting %s is missing from xds.Fields(), so from the docs", leaf)
		}
	}
	// Every flag in the table exists.
	help, err := exec.Command(bins.sidecar, "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar run --help: %v\n%s", err, help)
	}
	for _, f := range xdsFlags {
		if !strings.Contains(string(help), f.flag+" ") {
			t.Errorf("sidecar run --help does not list %s", f.flag)
		}
		if _, ok := fields[f.field]; !ok {
			t.Errorf("flag %s maps to %s, which is not a setting", f.flag, f.field)
		}
	}

	doc := xdsConfigurationDoc(t)
	path := filepath.Join(root, "docs", "configuration.md")
	if *xdsUpdateDocs {
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	old, err := os.ReadFile(path)
	if err != nil || string(old) != doc {
		t.Fatalf("docs/configuration.md is missing or out of date with xds.Fields() (%v); regenerate it:\n"+
			"  go test ./e2e -run TestXDSConfigurationDocs -update", err)
	}
}

// xdsLeaves lists the dotted paths of every leaf field (durations are leaves).
func xdsLeaves(md protoreflect.MessageDescriptor, prefix string) []string {
	var out []string
	fs := md.Fields()
	for i := 0; i < fs.Len(); i++ {
		fd := fs.Get(i)
		p := prefix + string(fd.Name())
		if m := fd.Message(); m != nil && !fd.IsList() && m.ParentFile().Package() != "google.protobuf" {
			out = append(out, xdsLeaves(m, p+".")...)
			continue
		}
		out = append(out, p)
	}
	return out
}

func xdsConfigurationDoc(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

	w("# Stormgate configuration\n\n")
	w("<!-- Generated from xds.Fields() and xds.Defaults() by e2e/xds_docs_test.go; do not edit by hand.\n")
	w("     Regenerate: go test ./e2e -run TestXDSConfigurationDocs -update -->\n\n")
	w("One schema, `stormgate.v1.Settings` ([xds/stormgatev1/settings.proto](../xds/stormgatev1/settings.proto)),\n")
	w("is used by the settings file, the flags' defaults, `/config_dump` and xDS. Names are snake_case;\n")
	w("durations are written like `3s`, `500ms` or `1m30s`.\n\n")

	w("## Where settings come from\n\n")
	w("Lowest to highest precedence; each layer sets only the fields it names, the others keep the value\n")
	w("from the layer below:\n\n")
	w("1. built-in defaults (the *Default* column below; `xds.Defaults()` is the one place they live);\n")
	w("2. the settings file: `sidecar run --config FILE`;\n")
	w("3. the command-line flags of `sidecar run`:\n\n")
	w("   | Flag | Setting |\n   |---|---|\n")
	for _, f := range xdsFlags {
		w("   | `%s` | `%s` |\n", f.flag, f.field)
	}
	w("\n   A flag counts only when given: its default does not override the file.\n")
	w("4. live pushes from a control plane: `sidecar run --xds HOST:PORT --node-id ID`. A push is merged\n")
	w("   over the sidecar's startup settings (defaults, file, flags), so a field the control plane stops\n")
	w("   setting goes back to its startup value.\n\n")

	w("## The settings file\n\n")
	w("YAML (JSON is YAML too) in the schema's shape. Any subset of the fields is a valid file. Rules:\n\n")
	w("- names are the snake_case names below (the proto's JSON camelCase names are accepted too);\n")
	w("- durations: a string Go's `time.ParseDuration` reads (`3s`, `0.05s`, `500ms`, `1m30s`) or a bare `0`;\n")
	w("- enums by name (`HOLD`), booleans `true`/`false`, lists in YAML list syntax (`[20880, 20881]`);\n")
	w("- an unknown field, a wrong type, a value out of range or a field set twice is an error that names\n")
	w("  the field, the allowed range and the line; `sidecar run` refuses to start with it, naming the file.\n")
	w("  `sidecar validate` reports every problem of a file in one run (up to 50), so one typo does not hide\n")
	w("  the next mistake; it takes files and directories (every `*.yaml`/`*.yml` in them).\n\n")
	w("```yaml\nlistener:  { address: 0.0.0.0:20881 }\nupstream:  { address: 127.0.0.1:20880, connections: 4 }\n")
	w("keepalive: { upstream_interval: 30s }\nhold:      { timeout: 3s }\n```\n\n")
	w("[examples/stormgate.yaml](../examples/stormgate.yaml) lists every field at its default. Check files before\n")
	w("shipping them (also control-plane files, below):\n\n")
	w("```console\n$ sidecar validate stormgate.yaml\n%s```\n\n", xdsValidateExample(t))

	w("## Settings\n\n")
	w("*Live* means a change (a push, see below) takes effect within a second on a running sidecar, without\n")
	w("dropping a connection or failing a request. A push that changes a *restart* field is refused with a\n")
	w("NACK naming the field; change it in the file or flags and restart the sidecar. Socket options\n")
	w("(`admission.tcp_*`) apply to connections accepted after the change.\n")
	var section string
	for _, f := range xds.Fields() {
		sec, _, _ := strings.Cut(f.Path, ".")
		if sec != section {
			section = sec
			w("\n### %s\n\n", sec)
			if d := xdsSections[sec]; d != "" {
				w("%s\n\n", d)
			}
			w("| Setting | Default | Allowed | Live | Meaning |\n|---|---|---|---|---|\n")
		}
		live := "live"
		if !f.Live || xdsRestartOnly[f.Path] {
			live = "**restart**"
		}
		def := "`" + f.Default + "`"
		if f.Default == "" {
			def = "(empty)"
		}
		w("| `%s` | %s | %s | %s | %s |\n", f.Path, cell(def), cell(f.Allowed), live, cell(f.Help))
	}
	w("\n")

	w("## Live changes over xDS\n\n")
	w("With `--xds HOST:PORT` the sidecar keeps an ADS stream (gRPC, `envoy.service.discovery.v3`) to the\n")
	w("control plane and subscribes to one `envoy.config.core.v3.TypedExtensionConfig` resource, named\n")
	w("`%s` by default (`--xds-resource`), whose `typed_config` is an `Any` holding a `stormgate.v1.Settings`\n", xds.DefaultResourceName)
	w("(type URL `%s`). Any go-control-plane snapshot cache can serve it. The node id is\n", xds.SettingsType)
	w("`--node-id`, else `$POD_NAME.$POD_NAMESPACE`. TLS: `--xds-ca` (verify the server), plus `--xds-cert`\n")
	w("and `--xds-key` for mTLS.\n\n")
	w("Each push is merged over the startup settings, validated, checked against the running settings for\n")
	w("*restart* fields, and applied to every stage; then it is ACKed. Otherwise it is NACKed with an\n")
	w("`error_detail` naming each bad field and why, and the running settings stay. A bad version is NACKed\n")
	w("once, not again when the snapshot cache re-sends it (go-control-plane#962). While the control plane is\n")
	w("away the sidecar keeps its last settings and reconnects with exponential backoff and full jitter\n")
	w("(250 ms up to 10 s).\n\n")
	w("Metrics: `stormgate_xds_updates_total{result=\"ack|nack\"}`, `stormgate_xds_connected` (1 while the\n")
	w("stream is up), `stormgate_xds_rejecting` (1 while the newest version served is NACKed: alert on it, not on\n")
	w("the NACK counter), `stormgate_xds_config_info{version,source}` (always 1, labels of the active settings).\n")
	w("Each applied change is logged as `settings applied` with the fields that changed, old -> new.\n\n")
	w("## Reloading the file (SIGHUP)\n\n")
	w("Without `--xds`, `kill -HUP` re-reads the `--config` file (and applies the flags over it again) and\n")
	w("applies it like a push: validated whole, *restart* fields refused, then every stage updated, or nothing\n")
	w("at all. A bad file is logged at WARN as `settings file rejected; keeping the running settings` with\n")
	w("every problem (field, allowed range, file line) and shows in `/config_dump` as `last_rejected`. With\n")
	w("`--xds` the control plane owns the settings: the file is only the base pushes merge over, read once at\n")
	w("start, and a reload would be undone by the next push, so SIGHUP is ignored with a WARN saying so.\n\n")

	w("## The control-plane file\n\n")
	w("`sidecar control-plane --listen 127.0.0.1:18000 --config FILE|DIR` is the reference control plane\n")
	w("(go-control-plane server and snapshot cache). Its file has two keys:\n\n")
	w("```yaml\ndefault:                 # partial settings served to every node\n")
	w("  keepalive: { upstream_interval: 30s }\n  admission: { accept_rate: 2000 }\n")
	w("nodes:                   # node id -> partial settings merged over default\n")
	w("  order-provider-0.shop:\n    upstream: { connections: 8 }\n```\n\n")
	w("- A node receives `default` with its own entry merged over it: only what the file sets, so the\n")
	w("  sidecar's own file and flags fill in the rest. A node without an entry receives `default`.\n")
	w("- `--config DIR` reads every `*.yaml` and `*.yml` file in DIR (not hidden ones, not recursively) in name\n")
	w("  order: their `default`s merge in that order; a node id may appear in one file only.\n")
	w("- The config is re-read every 500 ms and validated (every node's effective settings) before it is\n")
	w("  published; a bad edit is logged with the field and the allowed range and the previous config keeps\n")
	w("  being served. Edits reach the sidecars' `/config_dump` within about a second.\n")
	w("- The version served is a content hash of the node's settings. NACKs are logged with the node, the\n")
	w("  rejected version and the error, and the rejected version is not re-sent until the node's settings\n")
	w("  change.\n")
	w("- `--metrics ADDR` serves `stormgate_control_plane_loads_total{result=\"published|invalid\"}` and\n")
	w("  `stormgate_control_plane_nacks_total`; `--resource-name` changes the resource name served.\n\n")

	w("## /config_dump\n\n")
	w("`GET /config_dump` on the admin listener (`--admin`, default `127.0.0.1:15000`; keep it on loopback)\n")
	w("returns the active settings: every field (snake_case, durations as protobuf JSON prints them), the\n")
	w("version (a content hash; for xDS, the control plane's version), and where they came from:\n\n")
	w("- `field_sources`: for every field, the layer its value comes from: `%s` (built in), `%s` (the\n", xds.SourceDefaults, xds.SourceFile)
	w("  `--config` file, named in `file`), `%s` (a `sidecar run` flag) or `%s` (pushed by the control\n", xds.SourceFlag, xds.SourceXDS)
	w("  plane; a pushed field whose value equals the startup value keeps the startup source);\n")
	w("- `source`: what made the last change (`%s` after a push, `%s` after a SIGHUP reload; at start the\n", xds.SourceXDS, xds.SourceFile)
	w("  most specific layer that set any field) and `applied`, when;\n")
	w("- `rejecting`: true while the control plane's newest version is NACKed (the metric\n")
	w("  `stormgate_xds_rejecting`); `last_rejected`: the last version refused, from xDS or a SIGHUP reload,\n")
	w("  with its error and time (it stays on record after a good version is applied).\n\n")
	w("`GET /config_dump?format=yaml` prints the settings alone as a settings file that `sidecar run\n")
	w("--config` reads back. With the defaults:\n\n")
	w("```json\n%s```\n", xdsConfigDumpExample(t))
	return b.String()
}

// xdsValidateExample runs `sidecar validate` on a broken file, as a user would.
func xdsValidateExample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "stormgate.yaml"), []byte("keepalive:\n  upstream_interval: -1s\nhold:\n  timout: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.sidecar, "validate", "stormgate.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("sidecar validate accepted a negative interval:\n%s", out)
	}
	return string(out)
}

// xdsConfigDumpExample is what /config_dump serves for the defaults, with a
// fixed "applied" time so the docs stay stable.
func xdsConfigDumpExample(t *testing.T) string {
	t.Helper()
	st, err := xds.NewStore(xds.Defaults(), xds.Version(xds.Defaults()), xds.SourceDefaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	st.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/config_dump", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/config_dump: %d %s", rec.Code, rec.Body)
	}
	return regexp.MustCompile(`"applied": "[^"]*"`).ReplaceAllString(rec.Body.String(), `"applied": "2026-01-02T03:04:05Z"`)
}
