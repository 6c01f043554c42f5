package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProviderKillLoggedAtOnce is issue 16's acceptance 1: after a provider SIGKILL,
// within 1 s the sidecar logs one line that names the provider, the kernel's error
// once the port is closed (connection refused, with what it means) and what happens
// to requests meanwhile; later failures are summarised, not logged one by one (the
// old behaviour logged attempt 20, ~13 s later, with "connection has been closed by
// peer"). Real binaries.
func TestProviderKillLoggedAtOnce(t *testing.T) {
	prov := startProvider(t, "")
	sc := startSidecar(t, prov.addr, "", 4)
	killed := time.Now()
	if err := prov.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m := sc.waitJSONLine(t, false, 5*time.Second, `"cannot connect to provider"`, func(m map[string]any) bool {
		return m["msg"] == "cannot connect to provider"
	})
	if d := time.Since(killed); d > time.Second+500*time.Millisecond { // 1 s, and slack for a loaded machine's log pipe
		t.Errorf("first outage line %v after the kill; want within 1 s", d)
	}
	errText, _ := m["error"].(string)
	if m["provider"] != prov.addr || !strings.Contains(errText, "connection refused") ||
		!strings.Contains(m["meaning"].(string), "nothing listens") || !strings.Contains(m["requests"].(string), "held up to hold.timeout") {
		t.Errorf("outage line: %v", m)
	}
	if m["level"] != "warn" {
		t.Errorf("outage line level %v; want warn (a human should look)", m["level"])
	}
	// Four connections redial with backoff for 3 s: one line at once, no flood.
	time.Sleep(3 * time.Second)
	n := 0
	for _, l := range sc.logLines() {
		if strings.Contains(l, `"msg":"cannot connect to provider"`) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d \"cannot connect to provider\" lines in 3 s; want 1 (then a summary every 10 s)", n)
	}
}
