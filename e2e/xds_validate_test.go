package e2e

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/reflect/protoreflect"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Issue 5, acceptance 5: `sidecar validate` passes on every settings or
// control-plane file in the repository (examples/*.yaml, deploy/**/*.yaml,
// including such files embedded in a Kubernetes ConfigMap), and on a broken
// file exits non-zero with a message naming the field, what is wrong, the
// allowed range and the line.
func TestXDSValidateExamples(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	var candidates []string
	for _, pat := range []string{"examples/*.yaml", "examples/*.yml"} {
		m, _ := filepath.Glob(filepath.Join(root, pat))
		candidates = append(candidates, m...)
	}
	err = filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			candidates = append(candidates, path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}

	tmp := t.TempDir()
	var files []string           // settings or control-plane files to validate
	shown := map[string]string{} // file -> what the log calls it
	for _, path := range candidates {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		if xdsConfigKind(data) != "" {
			files = append(files, path)
			shown[path] = rel
			continue
		}
		embedded := xdsEmbeddedConfigs(data)
		for i, e := range embedded {
			p := filepath.Join(tmp, strings.NewReplacer("/", "_").Replace(rel)+"."+e.key+"."+string(rune('a'+i))+".yaml")
			if err := os.WriteFile(p, e.data, 0o600); err != nil {
				t.Fatal(err)
			}
			files = append(files, p)
			shown[p] = rel + " [ConfigMap data " + e.key + "]"
		}
		if len(embedded) == 0 {
			t.Logf("skipped %s: not a settings or control-plane file", rel)
		}
	}
	if len(files) < 2 {
		t.Fatalf("found %d settings/control-plane files (%v); want at least examples/stormgate.yaml and examples/control-plane.yaml", len(files), files)
	}
	out, err := exec.Command(bins.sidecar, append([]string{"validate"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar validate %v: %v\n%s", files, err, out)
	}
	for _, f := range files {
		if !bytes.Contains(out, []byte(f+": ok")) {
			t.Errorf("sidecar validate did not say %s: ok:\n%s", f, out)
		}
		t.Logf("valid: %s (%s)", shown[f], xdsConfigKindOfFile(t, f))
	}

	example, err := os.ReadFile(filepath.Join(root, "examples", "stormgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	brokenExample := strings.Replace(string(example), "upstream_interval: 30s", "upstream_interval: 0s", 1)
	if brokenExample == string(example) {
		t.Fatal(`examples/stormgate.yaml has no "upstream_interval: 30s" line to break`)
	}

	broken := []struct {
		name, content string
		want          []string // every one must appear in the output
	}{
		{"negative interval", "keepalive:\n  upstream_interval: -1s\n",
			[]string{"keepalive.upstream_interval: -1s is negative; must be between 1s and 1h", "line 2"}},
		{"example with interval 0", brokenExample,
			[]string{"keepalive.upstream_interval: 0s is too small; must be between 1s and 1h", "line "}},
		{"misspelled section", "admision:\n  accept_rate: 100\n",
			[]string{"admision: unknown field; did you mean admission?", "line 1"}},
		{"wrong type", "admission:\n  accept_rate: fast\n",
			[]string{`admission.accept_rate: "fast" is not a number`, "line 2"}},
		{"bad enum", "drain:\n  readonly_policy: DROP\n",
			[]string{"drain.readonly_policy", "HOLD", "PROPAGATE"}},
		{"control plane node out of range", "default:\n  log: { level: info }\nnodes:\n  pod-a:\n    upstream: { connections: 0 }\n",
			[]string{"nodes.pod-a.upstream.connections: 0 is too small; must be between 1 and 64", "line 5"}},
		{"control plane bad default", "default:\n  admission: { accept_rate: -3 }\n",
			[]string{"default.admission.accept_rate: -3 is negative; must be between 1 and 1000000"}},
	}
	for _, b := range broken {
		p := filepath.Join(tmp, strings.ReplaceAll(b.name, " ", "-")+".yaml")
		if err := os.WriteFile(p, []byte(b.content), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bins.sidecar, "validate", p)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() == 0 {
			t.Errorf("%s: sidecar validate exited with %v, want a non-zero exit\n%s", b.name, err, out)
			continue
		}
		for _, w := range b.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: output does not contain %q:\n%s", b.name, w, out)
			}
		}
		first, _, _ := strings.Cut(string(out), "\n")
		t.Logf("%s: %s", b.name, strings.TrimPrefix(first, p+": "))
	}
}

// xdsConfigKind tells a settings file ("settings") or a control-plane file
// ("control-plane") from any other YAML (""): every top-level key must be a
// Settings section, or default/nodes.
func xdsConfigKind(data []byte) string {
	var doc map[string]any
	if yaml.Unmarshal(data, &doc) != nil || len(doc) == 0 {
		return ""
	}
	fields := (&sg.Settings{}).ProtoReflect().Descriptor().Fields()
	settings, cp := true, true
	for k := range doc {
		if fields.ByName(protoreflect.Name(k)) == nil {
			settings = false
		}
		if k != "default" && k != "namespaces" && k != "selectors" && k != "nodes" {
			cp = false
		}
	}
	switch {
	case settings:
		return "settings"
	case cp:
		return "control-plane"
	}
	return ""
}

func xdsConfigKindOfFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return xdsConfigKind(data)
}

type xdsEmbedded struct {
	key  string
	data []byte
}

// xdsEmbeddedConfigs returns the settings or control-plane files held in the
// data of Kubernetes ConfigMaps in a (multi-document) manifest.
func xdsEmbeddedConfigs(manifest []byte) []xdsEmbedded {
	var out []xdsEmbedded
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	for {
		var doc struct {
			Kind string            `yaml:"kind"`
			Data map[string]string `yaml:"data"`
		}
		if err := dec.Decode(&doc); err != nil {
			break // io.EOF, or not a manifest we understand
		}
		if doc.Kind != "ConfigMap" {
			continue
		}
		for k, v := range doc.Data {
			if xdsConfigKind([]byte(v)) != "" {
				out = append(out, xdsEmbedded{key: k, data: []byte(v)})
			}
		}
	}
	return out
}
