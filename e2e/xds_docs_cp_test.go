package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/internal/promscrape"
	"github.com/stormgate/stormgate/xds"
	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
)

// xdsLiveDocs writes the "Live changes over xDS" and "The control-plane
// file" sections of docs/configuration.md (issue 15: replicas, node
// metadata, selectors).
func xdsLiveDocs(t *testing.T, w func(string, ...any)) {
	w("## Live changes over xDS\n\n")
	w("With `--xds HOST:PORT` the sidecar keeps an ADS stream (gRPC over HTTP/2, `envoy.service.discovery.v3`, state of the\n")
	w("world; h2c, or TLS with ALPN `h2`) to the control plane and subscribes to one `envoy.config.core.v3.TypedExtensionConfig` resource, named\n")
	w("`%s` by default (`--xds-resource`), whose `typed_config` is an `Any` holding a `stormgate.v1.Settings`\n", xds.DefaultResourceName)
	w("(type URL `%s`). Any go-control-plane snapshot cache can serve it. The node id is\n", xds.SettingsType)
	w("`--node-id`, else `$POD_NAME.$POD_NAMESPACE`. TLS: `--xds-ca` (verify the server), plus `--xds-cert`\n")
	w("and `--xds-key` for mTLS.\n\n")
	w("Each push is merged over the startup settings, validated, checked against the running settings for\n")
	w("*restart* fields, and applied to every stage; then it is ACKed. Otherwise it is NACKed with an\n")
	w("`error_detail` naming each bad field and why, and the running settings stay. A bad version is NACKed\n")
	w("once, not again when the snapshot cache re-sends it (go-control-plane#962).\n\n")
	w("### Several control planes\n\n")
	w("`--xds a:18000,b:18000` names replicas that serve the same files. The sidecar keeps one stream, to one of\n")
	w("them: it starts at the address a hash of its node id picks (so a fleet spreads over the replicas) and stays\n")
	w("there. When the stream ends (the replica was killed, restarted, or the network broke) it tries the next\n")
	w("address after a random pause of at most 250 ms, and backs off exponentially (full jitter, up to 10 s) only\n")
	w("after every address failed in a row. A refused connection costs nothing; an address that accepts TCP but\n")
	w("sends no byte (no TLS ServerHello, no HTTP/2 SETTINGS) costs the 5 s connect timeout, and one that takes the stream but sends nothing for 15 s is\n")
	w("left too; a peer that vanished without a FIN is found by an HTTP/2 PING after 5 min without a frame,\n")
	w("answered within 20 s (grpc-go servers, the reference control plane among them, accept pings 5 min apart by default).\n")
	w("Meanwhile the last settings stay as they are, and since replicas serve the\n")
	w("same content-hash version, reconnecting to another replica changes nothing on the data plane.\n\n")
	w("Metrics: `stormgate_xds_updates_total{result=\"ack|nack\"}`, `stormgate_xds_connected` (1 while the\n")
	w("stream is up), `stormgate_xds_control_plane{address}` (1 for the replica in use), `stormgate_xds_failovers_total`,\n")
	w("`stormgate_xds_rejecting` (1 while the newest version served is NACKed: alert on it, not on the NACK\n")
	w("counter), `stormgate_xds_config_info{version,source}` (always 1, labels of the active settings).\n")
	w("Each applied change is logged as `settings applied` with the fields that changed, old -> new.\n\n")
	w("### Reloading the file (SIGHUP)\n\n")
	w("Without `--xds`, `kill -HUP` re-reads the `--config` file (and applies the flags over it again) and\n")
	w("applies it like a push: validated whole, *restart* fields refused, then every stage updated, or nothing\n")
	w("at all. A bad file is logged at WARN as `settings file rejected; keeping the running settings` with\n")
	w("every problem (field, allowed range, file line) and shows in `/config_dump` as `last_rejected`. With\n")
	w("`--xds` the control plane owns the settings: the file is only the base pushes merge over, read once at\n")
	w("start, and a reload would be undone by the next push, so SIGHUP is ignored with a WARN saying so.\n\n")
	w("### What a sidecar reports\n\n")
	w("The control plane picks a node's settings by what the node reports in its xDS node (read once at start):\n\n")
	w("| Reported as | Flag | Else from | Used by |\n|---|---|---|---|\n")
	w("| `node.id` | `--node-id` | `$POD_NAME.$POD_NAMESPACE` | `nodes:` |\n")
	w("| `node.metadata.%s` | `--xds-namespace` | `$POD_NAMESPACE` | `namespaces:`, `match.namespace` |\n", xds.MetaNamespace)
	w("| `node.metadata.%s` (string map) | `--xds-labels app=payment,track=canary` and `--xds-labels-file FILE` (a Kubernetes downward-API labels file; adds to, and wins over, `--xds-labels`) | `$STORMGATE_POD_LABELS`, `$STORMGATE_POD_LABELS_FILE` | `match.labels` |\n", xds.MetaLabels)
	w("| `node.cluster` | `--xds-cluster` | `$STORMGATE_CLUSTER` | `match.cluster` |\n")
	w("| `node.metadata.%s` (list) | none | the port of `upstream.address`, or `listener.inbound_ports` in transparent mode | `match.port` |\n\n", xds.MetaProviderPorts)
	w("`sidecar inject` sets `POD_NAME` and `POD_NAMESPACE` from the pod, and its labels in `STORMGATE_POD_LABELS` (downward\n")
	w("API: one `fieldRef: metadata.labels['key']` variable per label of the pod template, joined). A labels file is the\n")
	w("other way to pass every label, including those added after injection: a `downwardAPI` volume item with\n")
	w("`fieldRef: metadata.labels`, named by `--xds-labels-file`.\n\n")
	w("### Metrics and /readyz\n\n")
	w("- `stormgate_xds_connected`: 1 while a stream is up; `stormgate_xds_control_plane{address}`: 1 for the\n")
	w("  address in use, 0 for the other configured ones; `stormgate_xds_failovers_total`: times the stream came\n")
	w("  up on another address than before;\n")
	w("- `stormgate_xds_updates_total{result=\"ack|nack\"}`; `stormgate_xds_rejecting`: 1 while the latest version\n")
	w("  received was NACKed and none applied since;\n")
	w("- `stormgate_xds_config_info{version,source}` (always 1, labels of the active settings).\n\n")
	w("`/readyz` stays 200 whatever the control plane does (traffic does not depend on it) and adds one line:\n\n")
	w("```\nready\nxds: disconnected since 2026-01-02T03:04:05Z (12s), trying 10.0.0.2:18000; last error: Unavailable: ...; running settings version 5ab27bf0b20c (last good, unchanged while disconnected)\n```\n\n")

	w("## The control-plane file\n\n")
	w("`sidecar control-plane --listen 127.0.0.1:18000 --config FILE|DIR` is the reference control plane\n")
	w("(go-control-plane server and snapshot cache). Its file has four levels; each is a partial settings\n")
	w("(any subset of the settings file) merged over the one before it, field by field:\n\n")
	w("```yaml\n%s```\n\n", xdsControlPlaneExample)
	w("- **Precedence**: `default` < `namespaces.<namespace>` < `selectors` < `nodes.<node id>`. A node gets only\n")
	w("  what the file sets; the sidecar's own file and flags fill in the rest.\n")
	w("- **Selectors** match what a node reports: every condition given must hold (`labels`: each label present\n")
	w("  with that value; `port`: among the node's provider ports). A selector needs at least one of `labels`,\n")
	w("  `cluster`, `port` (a namespace alone belongs under `namespaces:`) and a `name`, which the control plane\n")
	w("  logs for each node it matches.\n")
	w("- **Specificity**: when several selectors match a node, a more specific one (its match has every condition\n")
	w("  of the other, and more) wins, field by field. Two selectors that can match the same node without one being\n")
	w("  more specific must not set a field to different values, unless a third selector whose match is exactly\n")
	w("  both combined sets it; two selectors with the same match are refused too. The error names both, their\n")
	w("  lines and the fix:\n\n")
	w("  ```console\n  $ sidecar validate control-plane.yaml\n%s  ```\n\n", indent(xdsOverlapExample(t), "  "))
	w("- **Refused fields**: an entry at any level that sets a field a sidecar cannot change live (the *restart*\n")
	w("  fields above) is refused: every sidecar would NACK it. Set those in each sidecar's file or flags.\n")
	w("- **Directories**: `--config DIR` reads every `*.yaml` and `*.yml` file in DIR (not hidden ones, not\n")
	w("  recursively; ConfigMap symlinks are followed) in name order: their `default`s merge in that order; a\n")
	w("  namespace, selector name or node id may be defined in one file only (the error names both files), and\n")
	w("  selectors in different files must be orderable as above. `sidecar validate DIR` runs the same checks.\n")
	w("- The config is re-read every 500 ms and validated before it is published; a bad edit is logged with the\n")
	w("  file, line, field and allowed range, `stormgate_control_plane_config_valid` drops to 0, and the previous\n")
	w("  config keeps being served. Edits reach the sidecars' `/config_dump` within about a second.\n")
	w("- The version served is a content hash of the node's settings: replicas reading the same files serve the\n")
	w("  same version, with no coordination between them. Nodes that report the same metadata are resolved once,\n")
	w("  and nodes that resolve to the same settings share one snapshot, so a change costs work for the nodes it\n")
	w("  changes (measured in docs/benchmarks.md, section 6).\n")
	w("- **Logs**: each node's connection (`node connected`: what it reported and `settings_from`, the entries that\n")
	w("  apply, e.g. `default < namespaces.shop < selectors.payment`; a node that matches nothing specific gets\n")
	w("  a `note` saying so, which is how a mistyped node id or label shows), `node applied settings (ACK)`,\n")
	w("  `node rejected settings (NACK)` with the error, and `node disconnected`.\n")
	w("- `--metrics ADDR` serves `/metrics` and `/nodes` (JSON: every connected node, what it reported, its\n")
	w("  `settings_from`, the version served and ACKed; `?from=selectors.NAME` or `?rejecting=1` filter):\n\n")
	w("  | Metric | Meaning |\n  |---|---|\n")
	for _, m := range xdsControlPlaneMetrics {
		w("  | `%s` | %s |\n", strings.ReplaceAll(m[0], "|", `\|`), m[1]) // a pipe in a table cell, code or not, must be escaped
	}
	w("\n  `--resource-name` changes the resource name served.\n\n")
}

// xdsControlPlaneMetrics are the control plane's metrics as the docs list
// them; TestXDSControlPlaneMetricsDocumented checks each is served.
var xdsControlPlaneMetrics = [][2]string{
	{"stormgate_control_plane_config_valid", "1 when the files as they are now are valid and published; 0 while they are invalid and the previous config is served (alert on 0 for a few minutes)"},
	{"stormgate_control_plane_config_published_timestamp_seconds", "when the config being served was published"},
	{`stormgate_control_plane_loads_total{result="published|invalid"}`, "reads that found a change, by result"},
	{`stormgate_control_plane_nodes{settings_from="default|namespace|selector|node"}`, "connected nodes by the most specific level that applies to them"},
	{"stormgate_control_plane_nodes_rejecting", "connected nodes that NACKed the settings served to them"},
	{"stormgate_control_plane_settings_versions", "distinct settings versions served (one shared snapshot each)"},
	{"stormgate_control_plane_pushes_total", "settings responses sent"},
	{"stormgate_control_plane_acks_total", "responses ACKed"},
	{"stormgate_control_plane_nacks_total", "responses NACKed"},
	{"stormgate_control_plane_ack_duration_seconds", "histogram: from setting a node's new settings to its ACK"},
	{"stormgate_build_info{version,go}", "always 1: the build serving, as on every sidecar"},
}

const xdsControlPlaneExample = `default:                     # every node
  keepalive: { upstream_interval: 30s }
  admission: { accept_rate: 2000 }
namespaces:                  # nodes reporting this namespace
  shop:
    hold: { timeout: 2s }
selectors:                   # nodes matching every condition
  - name: payment
    match: { labels: { app: payment } }
    settings:
      upstream: { connections: 6 }
  - name: payment-canary     # more specific than payment: wins where both match
    match: { namespace: shop, labels: { app: payment, track: canary } }
    settings:
      upstream: { connections: 2 }
      log: { level: debug }
nodes:                       # one node id
  order-provider-0.shop:
    upstream: { connections: 8 }
`

// xdsOverlapExample runs `sidecar validate` on two selectors that cannot be
// ordered.
func xdsOverlapExample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	body := "selectors:\n  - name: payment\n    match: { labels: { app: payment } }\n    settings: { hold: { timeout: 1s } }\n" +
		"  - name: canary\n    match: { labels: { track: canary } }\n    settings: { hold: { timeout: 2s } }\n"
	if err := os.WriteFile(filepath.Join(dir, "control-plane.yaml"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bins.sidecar, "validate", "control-plane.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("sidecar validate accepted selectors that cannot be ordered:\n%s", out)
	}
	return string(out)
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// Every control-plane metric the docs list is served, and the example file
// in the docs is valid.
func TestXDSControlPlaneMetricsDocumented(t *testing.T) {
	if _, err := cpfile.Parse([]byte(xdsControlPlaneExample)); err != nil {
		t.Fatalf("the documented example is invalid: %v", err)
	}
	cfg := filepath.Join(t.TempDir(), "cp.yaml")
	writeFileAtomic(t, cfg, xdsControlPlaneExample)
	cp := startXDSControlPlane(t, "", cfg)
	for _, m := range xdsControlPlaneMetrics {
		name, _, _ := strings.Cut(m[0], "{")
		ms, err := promscrape.Get(context.Background(), cp.http, cp.metrics)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for k := range ms {
			base, _, _ := strings.Cut(k, "{")
			if base == name || base == name+"_count" {
				found = true
			}
		}
		if !found {
			t.Errorf("documented metric %s is not served", name)
		}
	}
}
