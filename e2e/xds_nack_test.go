package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Issue 5, acceptance 2: a bad push is NACKed with an error_detail naming the
// field, the old settings (and version) stay active, and exactly one NACK is
// sent per bad version (no loop with the snapshot cache's re-send,
// go-control-plane#962).
//
// Two control planes, because the reference one validates before publishing:
//   - reference: `sidecar control-plane` with a YAML file. It refuses what no
//     sidecar could apply (a negative interval, a listener.address that cannot
//     change live) and never publishes it. It validates over the built-in
//     defaults, so what it cannot see is the sidecar's own file: this sidecar
//     starts with upstream.backoff_base 1s, and a pushed backoff_max below
//     that is published and NACKed by the sidecar;
//   - any go-control-plane snapshot cache (in the test process) that publishes
//     whatever it is given: the sidecar NACKs the negative interval and the
//     listener.address change itself.
func TestXDSBadPushNACKed(t *testing.T) {
	const node = "e2e-nack"
	prov := startXDSProvider(t)

	t.Run("reference control plane", func(t *testing.T) {
		cfgPath := filepath.Join(t.TempDir(), "cp.yaml")
		good := "default:\n  keepalive: { upstream_interval: 20s }\n"
		writeFileAtomic(t, cfgPath, good)
		own := filepath.Join(t.TempDir(), "stormgate.yaml")
		writeFileAtomic(t, own, "upstream: { backoff_base: 1s, backoff_max: 2s }\n")
		cp := startXDSControlPlane(t, "", cfgPath)
		sc := startXDSSidecar(t, prov.Addr(), cp.addr, node, 4, "--config", own)
		v1 := cpVersion(t, good, node)
		running := sc.waitXDSApplied(t, 10*time.Second, v1)
		listen := running.field("listener.address")

		for i, max := range []string{"500ms", "800ms"} {
			bad := good + fmt.Sprintf("  upstream: { backoff_max: %s }\n", max)
			writeFileAtomic(t, cfgPath, bad)
			vBad := cpVersion(t, bad, node)
			xdsWantNACKs(t, sc, i+1, v1, running)

			var logged map[string]any
			poll(5*time.Second, func() bool {
				for _, m := range cp.jsonLines("node rejected settings (NACK)") {
					if m["rejected_version"] == vBad {
						logged = m
						return true
					}
				}
				return false
			})
			if logged == nil {
				t.Fatalf("control plane did not log the NACK of version %s", vBad)
			}
			detail, _ := logged["error"].(string)
			t.Logf("control plane logged: NACK of %v by %v, running %v: %s", logged["rejected_version"], logged["node_id"],
				logged["running_version"], detail)
			want := "upstream.backoff_max: " + max + " is below upstream.backoff_base (1s)"
			if !strings.Contains(detail, want) || logged["node_id"] != node || logged["running_version"] != v1 ||
				logged["settings_from"] != "default" {
				t.Errorf("control plane's NACK log does not say %q for node %s running %s: %v", want, node, v1, logged)
			}
			if n := cp.metric(t, "stormgate_control_plane_nacks_total"); n != float64(i+1) {
				t.Errorf("stormgate_control_plane_nacks_total = %v after %d bad versions, want %d", n, i+1, i+1)
			}
		}
		if n := cp.metric(t, "stormgate_control_plane_nodes_rejecting"); n != 1 {
			t.Errorf("stormgate_control_plane_nodes_rejecting = %v, want 1", n)
		}

		// What no sidecar could apply, the reference control plane refuses to publish.
		for i, c := range []struct{ text, field, problem string }{
			{"default:\n  keepalive: { upstream_interval: -5s }\n", "default.keepalive.upstream_interval", "must be between 1s and 1h"},
			{good + "  listener: { address: \"127.0.0.1:1\" }\n", "default.listener.address", "every sidecar would NACK"},
		} {
			writeFileAtomic(t, cfgPath, c.text)
			m := cp.waitJSONLine(t, false, 5*time.Second, `"config invalid"`, func(m map[string]any) bool {
				return strings.HasPrefix(fmt.Sprint(m["msg"]), "config invalid") && m["field"] == c.field
			})
			t.Logf("control plane refused to publish: %v", m["problem"])
			if p := fmt.Sprint(m["problem"]); !strings.Contains(p, c.problem) {
				t.Errorf("problem %q does not say %q", p, c.problem)
			}
			if n := cp.metric(t, "stormgate_control_plane_loads_total", `result="invalid"`); n != float64(i+1) {
				t.Errorf("stormgate_control_plane_loads_total{result=invalid} = %v, want %d", n, i+1)
			}
			if n := cp.metric(t, "stormgate_control_plane_config_valid"); n != 0 {
				t.Errorf("stormgate_control_plane_config_valid = %v while the file is invalid", n)
			}
			xdsWantNACKs(t, sc, 2, v1, running) // nothing new reached the sidecar
		}

		// A good edit after all that is applied.
		fixed := "default:\n  keepalive: { upstream_interval: 10s }\n"
		writeFileAtomic(t, cfgPath, fixed)
		cd := sc.waitXDSApplied(t, 5*time.Second, cpVersion(t, fixed, node))
		if cd.field("keepalive.upstream_interval") != "10s" || cd.field("listener.address") != listen {
			t.Errorf("after the fix /config_dump has upstream_interval %s listener.address %s, want 10s and %s",
				cd.field("keepalive.upstream_interval"), cd.field("listener.address"), listen)
		}
		if n := sc.metric(t, "stormgate_xds_updates_total", `result="nack"`); n != 2 {
			t.Errorf("NACKs = %v, want still 2", n)
		}
		if n := cp.metric(t, "stormgate_control_plane_config_valid"); n != 1 {
			t.Errorf("stormgate_control_plane_config_valid = %v after the fix", n)
		}
	})

	t.Run("any snapshot cache", func(t *testing.T) {
		fcp := startXDSFakeCP(t)
		v1 := fcp.push(t, node, &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: durationpb.New(20 * time.Second)}})
		sc := startXDSSidecar(t, prov.Addr(), fcp.addr, node, 4)
		running := sc.waitXDSApplied(t, 10*time.Second, v1)

		bad := []struct {
			field    string
			settings *sg.Settings
		}{
			{"keepalive.upstream_interval", &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: durationpb.New(-time.Second)}}},
			{"listener.address", &sg.Settings{Listener: &sg.Listener{Address: proto.String("127.0.0.1:1")}}},
			{"upstream.address", &sg.Settings{Upstream: &sg.Upstream{Address: proto.String("127.0.0.1:1")}}},
			{"log.format", &sg.Settings{Log: &sg.Log{Format: proto.String("console")}}},
		}
		for i, b := range bad {
			fcp.push(t, node, b.settings)
			xdsWantNACKs(t, sc, i+1, v1, running)
			nacks := fcp.nackList()
			if len(nacks) != i+1 {
				t.Fatalf("control plane received %d NACKs after %d bad versions, want %d: %+v", len(nacks), i+1, i+1, nacks)
			}
			n := nacks[i]
			t.Logf("NACK error_detail for a bad %s: %s", b.field, n.detail)
			if !strings.HasPrefix(n.detail, b.field+" ") && !strings.HasPrefix(n.detail, b.field+": ") ||
				n.node != node || n.runningVersion != v1 {
				t.Errorf("NACK %+v: want node %s, version_info %s (still running) and error_detail starting with %q",
					n, node, v1, b.field)
			}
		}
		if d := fcp.nackList()[0].detail; !strings.Contains(d, "is negative; must be between 1s and 1h") {
			t.Errorf("negative interval NACK %q does not say what is wrong and the allowed range", d)
		}
		for _, n := range fcp.nackList()[1:] {
			if !strings.Contains(n.detail, "cannot change") || !strings.Contains(n.detail, "restart the sidecar") {
				t.Errorf("NACK %q does not say the field cannot change live and what to do", n.detail)
			}
		}

		v4 := fcp.push(t, node, &sg.Settings{Keepalive: &sg.Keepalive{UpstreamInterval: durationpb.New(10 * time.Second)}})
		cd := sc.waitXDSApplied(t, 5*time.Second, v4)
		if cd.field("keepalive.upstream_interval") != "10s" {
			t.Errorf("after a good push upstream_interval = %s, want 10s", cd.field("keepalive.upstream_interval"))
		}
		if n := len(fcp.nackList()); n != len(bad) {
			t.Errorf("%d NACKs in all, want %d", n, len(bad))
		}
	})
}

// xdsWantNACKs waits until the sidecar has NACKed want pushes in all, checks
// for half a second that no further NACK follows (a client looping with the
// snapshot cache's re-send NACKs again within milliseconds), and that
// /config_dump still shows the running settings and version.
func xdsWantNACKs(t *testing.T, sc *sidecar, want int, version string, running configDump) {
	t.Helper()
	sc.waitMetric(t, 5*time.Second, "stormgate_xds_updates_total", func(v float64) bool { return v >= float64(want) }, `result="nack"`)
	stays(t, 500*time.Millisecond, fmt.Sprintf("%d NACKs", want), func() (bool, string) {
		n := sc.metric(t, "stormgate_xds_updates_total", `result="nack"`)
		return n == float64(want), fmt.Sprintf("stormgate_xds_updates_total{result=nack} = %v", n)
	})
	cd := sc.mustConfigDump(t)
	if cd.Version != version || cd.Source != "xds" {
		t.Errorf("after a NACK /config_dump has version %q source %q, want the running %q from xds", cd.Version, cd.Source, version)
	}
	for _, f := range []string{"listener.address", "keepalive.upstream_interval"} {
		if cd.field(f) != running.field(f) {
			t.Errorf("after a NACK /config_dump %s = %s, want the running %s", f, cd.field(f), running.field(f))
		}
	}
}
