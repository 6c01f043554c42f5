package settings

import (
	"os"
	"testing"
	"time"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// interval is settings that set keepalive.upstream_interval alone.
func interval(d time.Duration) *sg.Settings {
	return &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: dur(d)}}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
