package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stormgate/stormgate/loadgen"
)

// loadRun is a `stormbench load` process writing its result as JSON.
type loadRun struct {
	*proc
	jsonPath string
}

// startLoad runs `stormbench load --quiet --json FILE args...` (through prefix, e.g.
// `ip netns exec NS`, when given).
func startLoad(t *testing.T, prefix []string, args ...string) *loadRun {
	t.Helper()
	jsonPath := filepath.Join(t.TempDir(), "load.json")
	argv := append([]string{"load", "--quiet", "--json", jsonPath}, args...)
	bin := bins.stormbench
	if len(prefix) > 0 {
		argv = append(append(prefix[1:], bins.stormbench), argv...)
		bin = prefix[0]
	}
	return &loadRun{proc: startProc(t, "load", bin, argv...), jsonPath: jsonPath}
}

// result waits up to d for the run to end and returns what it measured.
func (l *loadRun) result(t *testing.T, d time.Duration) *loadgen.Result {
	t.Helper()
	if code := l.wait(t, d); code != 0 {
		l.dumpLogs(t, 20)
		t.Fatalf("stormbench load exited with status %d", code)
	}
	raw, err := os.ReadFile(l.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.ParseResult(raw)
	if err != nil {
		t.Fatalf("load result: %v", err)
	}
	return res
}
