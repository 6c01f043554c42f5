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

	"github.com/stormgate/stormgate/inject"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// The usual golden-file flag: `go test ./e2e -run TestXDSConfigurationDocs -update`.
var xdsUpdateDocs = flag.Bool("update", false, "rewrite docs/configuration.md from settings.Fields()")

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
	"http2": "What Stormgate announces in its HTTP/2 SETTINGS to Triple and gRPC consumers and to the provider " +
		"(`upstream.protocol` triple or both). A connection keeps the SETTINGS it opened with, as HTTP/2 peers expect: a change " +
		"applies to consumer connections opened after it, and to provider connections when they are next dialled. " +
		"SETTINGS_HEADER_TABLE_SIZE is always 0 and SETTINGS_MAX_FRAME_SIZE the protocol's 16,384 (docs/design.md §14.2, §14.7).",
}

// TestXDSConfigurationDocs keeps docs/configuration.md equal to what
// settings.Fields() and settings.Defaults() say (issue 5, acceptance 6: every setting
// with its meaning, default, range, and whether it is live).
func TestXDSConfigurationDocs(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// Every leaf of the schema is documented.
	fields := map[string]settings.FieldInfo{}
	for _, f := range settings.Fields() {
		fields[f.Path] = f
	}
	for _, leaf := range xdsLeaves((&sg.Settings{}).ProtoReflect().Descriptor(), "") {
		if _, ok := fields[leaf]; !ok {
			t.Errorf("setting %s is missing from settings.Fields(), so from the docs", leaf)
		}
	}
	// Every flag in the table exists.
	help, err := exec.Command(bins.sidecar, "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar run --help: %v\n%s", err, help)
	}
	for _, f := range settings.RunFlags {
		if !strings.Contains(string(help), "--"+f.Name+" ") || !strings.Contains(string(help), "("+f.Path+")") {
			t.Errorf("sidecar run --help does not list --%s (%s)", f.Name, f.Path)
		}
		if _, ok := fields[f.Path]; !ok {
			t.Errorf("flag --%s maps to %s, which is not a setting", f.Name, f.Path)
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
		t.Fatalf("docs/configuration.md is missing or out of date with settings.Fields() (%v); regenerate it:\n"+
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
	w("<!-- Generated from settings.Fields() and settings.Defaults() by e2e/xds_docs_test.go; do not edit by hand.\n")
	w("     Regenerate: go test ./e2e -run TestXDSConfigurationDocs -update -->\n\n")
	w("One schema, `stormgate.v1.Settings` ([settings/stormgatev1/settings.proto](../settings/stormgatev1/settings.proto)),\n")
	w("is used by the settings file, the flags' defaults, `/config_dump` and xDS. Names are snake_case;\n")
	w("durations are written like `3s`, `500ms` or `1m30s`.\n\n")

	w("## Where settings come from\n\n")
	w("Lowest to highest precedence; each layer sets only the fields it names, the others keep the value\n")
	w("from the layer below:\n\n")
	w("1. built-in defaults (the *Default* column below; `settings.Defaults()` is the one place they live);\n")
	w("2. the settings file: `sidecar run --config FILE`;\n")
	w("3. the command-line flags of `sidecar run`:\n\n")
	w("   | Flag | Setting |\n   |---|---|\n")
	for _, f := range settings.RunFlags {
		w("   | `--%s` | `%s` |\n", f.Name, f.Path)
	}
	w("\n   `--set PATH=VALUE` (repeatable) sets any other setting by its path, the value written as in the\n")
	w("   file: `--set hold.timeout=10s --set limits.max_frame_bytes=16MiB`. A flag counts only when given:\n")
	w("   its default does not override the file.\n")
	w("4. live pushes from a control plane: `sidecar run --xds HOST:PORT[,HOST:PORT] --node-id ID`. A push is merged\n")
	w("   over the sidecar's startup settings (defaults, file, flags), so a field the control plane stops\n")
	w("   setting goes back to its startup value.\n\n")

	w("## The settings file\n\n")
	w("YAML (JSON is YAML too) in the schema's shape. Any subset of the fields is a valid file. Rules:\n\n")
	w("- names are the snake_case names below (the proto's JSON camelCase names are accepted too);\n")
	w("- durations: a string Go's `time.ParseDuration` reads (`3s`, `0.05s`, `500ms`, `1m30s`) or a bare `0`;\n")
	w("- enums by name in any case (`HOLD`, `hold`), as are the fixed values of `log.level` and `log.format`;\n")
	w("  booleans `true`/`false`, lists in YAML list syntax (`[20880, 20881]`);\n")
	w("- byte sizes (the fields whose name has the word `bytes` or ends in `_size`): a number, or with a unit:\n")
	w("  `512KiB`, `64MiB`, `1GiB` (`Ki`, `Mi`, `Gi` and `K`, `M`, `G` too; `KB`, `MB`, `GB` are powers of 1000).\n")
	w("  `/config_dump` and xDS carry plain numbers;\n")
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
	w("*Pod annotation* sets the field for one injected pod ([kubernetes.md](kubernetes.md#annotations)).\n")
	w("*Live* means a change (a push, see below) takes effect within a second on a running sidecar, without\n")
	w("dropping a connection or failing a request. A push that changes a *restart* field is refused with a\n")
	w("NACK naming the field; change it in the file or flags and restart the sidecar. Socket options\n")
	w("(`admission.tcp_*`) apply to connections accepted after the change.\n")
	var section string
	for _, f := range settings.Fields() {
		sec, _, _ := strings.Cut(f.Path, ".")
		if sec != section {
			section = sec
			w("\n### %s\n\n", sec)
			if d := xdsSections[sec]; d != "" {
				w("%s\n\n", d)
			}
			w("| Setting | Default | Allowed | Live | Pod annotation | Meaning |\n|---|---|---|---|---|---|\n")
		}
		live := "live"
		if !f.Live {
			live = "**restart**"
		}
		def := "`" + f.Default + "`"
		if f.Default == "" {
			def = "(empty)"
		}
		ann := "(not per pod)"
		if a, ok := inject.SettingAnnotation(f.Path); ok {
			ann = "`" + a + "`"
		}
		w("| `%s` | %s | %s | %s | %s | %s |\n", f.Path, cell(def), cell(f.Allowed), live, ann, cell(f.Help))
	}
	w("\n")

	xdsLiveDocs(t, w)

	w("## /config_dump\n\n")
	w("`GET /config_dump` on the admin listener (`--admin`, default `127.0.0.1:15000`; keep it on loopback)\n")
	w("returns the active settings: every field (snake_case, durations as protobuf JSON prints them), the\n")
	w("version (a content hash; for xDS, the control plane's version), and where they came from:\n\n")
	w("- `field_sources`: for every field, the layer its value comes from: `%s` (built in), `%s` (the\n", settings.SourceDefaults, settings.SourceFile)
	w("  `--config` file, named in `file`), `%s` (a `sidecar run` flag), `%s` (pushed by the control\n", settings.SourceFlag, settings.SourceXDS)
	w("  plane; a pushed field whose value equals the startup value keeps the startup source) or `%s`\n", settings.SourceAdmin)
	w("  (`log.level` after `POST /logging?level=...` changed it: the dump shows the level in force);\n")
	w("- `source`: what made the last change (`%s` after a push, `%s` after a SIGHUP reload; at start the\n", settings.SourceXDS, settings.SourceFile)
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
	st, err := settings.NewStore(settings.Defaults(), settings.Version(settings.Defaults()), settings.SourceDefaults, nil)
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
