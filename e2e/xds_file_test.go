package e2e

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 5, acceptance 4: end to end with the real binaries, `sidecar
// control-plane --config DIR` and `sidecar run --xds`: each edit of a YAML file
// on disk (the default, a per-node override added, then removed) shows on the
// sidecar's /config_dump within 2 s, and a pushed log level is live (/logging).
func TestXDSFileEditReachesConfigDump(t *testing.T) {
	const node = "e2e-file"
	dir := t.TempDir()
	defaults := filepath.Join(dir, "00-default.yaml")
	nodes := filepath.Join(dir, "10-nodes.yaml")
	writeFileAtomic(t, defaults, "default:\n  hold: { timeout: 3s }\n  admission: { accept_rate: 2000 }\n")
	writeFileAtomic(t, nodes, "nodes:\n  some-other-node: { log: { level: debug } }\n")

	prov := startXDSProvider(t)
	cp := startXDSControlPlane(t, "", dir)
	sc := startXDSSidecar(t, prov.Addr(), cp.addr, node, 4)
	sc.waitConfigDump(t, 10*time.Second, "the first push", func(cd configDump) bool { return cd.Source == "xds" })

	edits := []struct {
		name, file, content string
		want                map[string]string
	}{
		{"default edited", defaults, "default:\n  hold: { timeout: 2s }\n  admission: { accept_rate: 2000 }\n",
			map[string]string{"hold.timeout": "2s", "admission.accept_rate": "2000", "log.level": "info"}},
		{"node override added", nodes, "nodes:\n  some-other-node: { log: { level: debug } }\n" +
			"  " + node + ": { log: { level: debug }, admission: { accept_rate: 3000 } }\n",
			map[string]string{"hold.timeout": "2s", "admission.accept_rate": "3000", "log.level": "debug"}},
		{"node override removed", nodes, "nodes:\n  some-other-node: { log: { level: debug } }\n",
			map[string]string{"hold.timeout": "2s", "admission.accept_rate": "2000", "log.level": "info"}},
	}
	for _, e := range edits {
		writeAt := time.Now()
		writeFileAtomic(t, e.file, e.content)
		_, seenAt := sc.waitConfigDump(t, 5*time.Second, e.name, func(cd configDump) bool {
			for k, v := range e.want {
				if cd.field(k) != v {
					return false
				}
			}
			return cd.Source == "xds"
		})
		took := seenAt.Sub(writeAt)
		t.Logf("%s (%s): on /config_dump %v after the write", e.name, filepath.Base(e.file), took.Round(time.Millisecond))
		if took > 2*time.Second {
			t.Errorf("%s: /config_dump showed it %v after the write, want <= 2s", e.name, took)
		}
		if lvl := xdsLogLevel(t, sc); lvl != e.want["log.level"] {
			t.Errorf("%s: /logging says level %q, want %q", e.name, lvl, e.want["log.level"])
		}
	}
	if n := sc.metric(t, "stormgate_xds_updates_total", `result="nack"`); n != 0 {
		t.Errorf("%v NACKs, want 0", n)
	}
}

// xdsLogLevel reads the sidecar's live log level from the admin /logging.
func xdsLogLevel(t *testing.T, sc *sidecar) string {
	t.Helper()
	resp, err := sc.http.Get("http://" + sc.admin + "/logging")
	if err != nil {
		t.Fatalf("/logging: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(b)), "level:"))
}
