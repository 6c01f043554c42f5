package cpfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/settings"
	"github.com/stormgate/stormgate/xds"
)

// One file exercising every level; the cases below resolve nodes against it.
const precedenceFile = `default:
  keepalive: { upstream_interval: 30s }
  hold: { timeout: 3s }
  log: { level: info }
namespaces:
  shop:
    hold: { timeout: 2s }
    log: { level: warn }
  bank:
    hold: { timeout: 1s }
selectors:
  - name: payment
    match: { labels: { app: payment } }
    settings:
      hold: { timeout: 1500ms }
      upstream: { connections: 6 }
  - name: payment-canary
    match: { namespace: shop, labels: { app: payment, track: canary } }
    settings:
      upstream: { connections: 2 }
  - name: east
    match: { cluster: east }
    settings:
      admission: { accept_rate: 3000 }
  - name: dubbo-20881
    match: { port: 20881 }
    settings:
      keepalive: { upstream_interval: 20s }
nodes:
  payment-0.shop:
    upstream: { connections: 9 }
`

func TestResolvePrecedence(t *testing.T) {
	f, err := Parse([]byte(precedenceFile))
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		from        string
		level       string
		holdTimeout time.Duration // 0 = not set by the file
		conns       int32
		interval    time.Duration
		acceptRate  float64
		logLevel    string
	}
	cases := []struct {
		name string
		node xds.NodeInfo
		want want
	}{
		{"nothing matches: default", xds.NodeInfo{ID: "x.other", Namespace: "other"},
			want{"default", "default", 3 * time.Second, 0, 30 * time.Second, 0, "info"}},
		{"namespace over default", xds.NodeInfo{ID: "x.shop", Namespace: "shop"},
			want{"default < namespaces.shop", "namespace", 2 * time.Second, 0, 30 * time.Second, 0, "warn"}},
		{"label selector over namespace", xds.NodeInfo{ID: "p.bank", Namespace: "bank", Labels: map[string]string{"app": "payment"}},
			want{"default < namespaces.bank < selectors.payment", "selector", 1500 * time.Millisecond, 6, 30 * time.Second, 0, "info"}},
		{"more specific selector over less specific", xds.NodeInfo{ID: "p.shop", Namespace: "shop",
			Labels: map[string]string{"app": "payment", "track": "canary"}},
			want{"default < namespaces.shop < selectors.payment < selectors.payment-canary", "selector", 1500 * time.Millisecond, 2, 30 * time.Second, 0, "warn"}},
		{"canary label outside its namespace: only the less specific selector", xds.NodeInfo{ID: "p.bank", Namespace: "bank",
			Labels: map[string]string{"app": "payment", "track": "canary"}},
			want{"default < namespaces.bank < selectors.payment", "selector", 1500 * time.Millisecond, 6, 30 * time.Second, 0, "info"}},
		{"node id over everything", xds.NodeInfo{ID: "payment-0.shop", Namespace: "shop",
			Labels: map[string]string{"app": "payment", "track": "canary"}},
			want{"default < namespaces.shop < selectors.payment < selectors.payment-canary < nodes.payment-0.shop", "node", 1500 * time.Millisecond, 9, 30 * time.Second, 0, "warn"}},
		{"cluster and port selectors (disjoint fields) both apply", xds.NodeInfo{ID: "c", Cluster: "east", Ports: []int32{20880, 20881}},
			want{"default < selectors.east < selectors.dubbo-20881", "selector", 3 * time.Second, 0, 20 * time.Second, 3000, "info"}},
		{"port selector needs the port among the node's", xds.NodeInfo{ID: "c", Ports: []int32{20880}},
			want{"default", "default", 3 * time.Second, 0, 30 * time.Second, 0, "info"}},
		{"a label value differs: no match", xds.NodeInfo{ID: "c", Labels: map[string]string{"app": "payments"}},
			want{"default", "default", 3 * time.Second, 0, 30 * time.Second, 0, "info"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := f.Resolve(c.node)
			o := r.Overlay
			got := want{strings.Join(r.From, " < "), r.Level(), o.GetHold().GetTimeout().AsDuration(),
				o.GetUpstream().GetConnections(), o.GetKeepalive().GetUpstreamInterval().AsDuration(),
				o.GetAdmission().GetAcceptRate(), o.GetLog().GetLevel()}
			if got != c.want {
				t.Errorf("\ngot  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// Selector files that must be refused, each with the message (and line) the
// operator sees.
func TestSelectorErrors(t *testing.T) {
	sel := func(name, match, settings string) string {
		return "  - name: " + name + "\n    match: " + match + "\n    settings: " + settings + "\n"
	}
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"incomparable overlap setting a field differently",
			"selectors:\n" + sel("a", "{labels: {app: payment}}", "{upstream: {connections: 6}}") +
				sel("b", "{labels: {track: canary}}", "{upstream: {connections: 2}}"),
			[]string{"selectors.b: overlaps selectors.a (line 2): a node matching both {labels: {app: payment}} and {labels: {track: canary}} " +
				"gets different upstream.connections (6 vs 2), and neither selector is more specific, so which wins would depend on order; " +
				"make one selector's match include all of the other's conditions, or add a selector matching " +
				"{labels: {app: payment, track: canary}} that sets upstream.connections (line 5)"}},
		{"cluster and label overlap",
			"selectors:\n" + sel("east", "{cluster: east}", "{hold: {timeout: 1s}}") +
				sel("pay", "{labels: {app: payment}}", "{hold: {timeout: 2s}}"),
			[]string{"selectors.pay: overlaps selectors.east (line 2)", "hold.timeout (1s vs 2s)", "(line 5)"}},
		{"two ports cannot be combined into one selector",
			"selectors:\n" + sel("p1", "{port: 20880}", "{hold: {timeout: 1s}}") +
				sel("p2", "{port: 20881}", "{hold: {timeout: 2s}}"),
			[]string{"selectors.p2: overlaps selectors.p1 (line 2)", "make one selector's match include all of the other's conditions (line 5)"}},
		{"same conditions twice",
			"selectors:\n" + sel("a", "{labels: {app: x}, cluster: c}", "{hold: {timeout: 1s}}") +
				sel("b", "{cluster: c, labels: {app: x}}", "{log: {level: debug}}"),
			[]string{"selectors.b: matches exactly the nodes selectors.a (line 2) matches ({cluster: c, labels: {app: x}}); merge the two into one selector (line 5)"}},
		{"duplicate name",
			"selectors:\n" + sel("a", "{labels: {app: x}}", "{}") + sel("a", "{labels: {app: y}}", "{}"),
			[]string{"selectors.a: name used twice (first at line 2) (line 5)"}},
		{"empty match",
			"selectors:\n" + sel("a", "{}", "{hold: {timeout: 1s}}"),
			[]string{"selectors.a.match: empty; give at least one of labels, cluster, port"}},
		{"namespace-only match belongs under namespaces",
			"selectors:\n" + sel("a", "{namespace: shop}", "{hold: {timeout: 1s}}"),
			[]string{"selectors.a.match: matches a whole namespace: put these settings under namespaces: shop"}},
		{"misspelt match key",
			"selectors:\n" + sel("a", "{lables: {app: x}}", "{}"),
			[]string{"selectors.a.match.lables: unknown field; match has namespace, cluster, port and labels; did you mean labels? (line 3)"}},
		{"bad port",
			"selectors:\n" + sel("a", "{port: 70000}", "{}"),
			[]string{`selectors.a.match.port: "70000" is not a port; must be between 1 and 65535`}},
		{"missing name",
			"selectors:\n  - match: {labels: {app: x}}\n    settings: {}\n",
			[]string{"selectors[0].name: missing; every selector needs a name"}},
		{"bad setting inside a selector, with its line",
			"selectors:\n" + sel("a", "{labels: {app: x}}", "\n      hold: {timeout: 2h}"),
			[]string{"selectors.a.hold.timeout: 2h is too large; must be between 0s and 1h (line 5)"}},
		{"selectors must be a list",
			"selectors: {a: {}}\n",
			[]string{"selectors: must be a list of {name, match, settings} (line 1)"}},
		{"fixed field in a selector",
			"selectors:\n" + sel("a", "{labels: {app: x}}", "\n      listener: {address: 0.0.0.0:1}"),
			[]string{"selectors.a.listener.address: cannot be served by a control plane: the listening socket is bound once at start " +
				"and consumers are connected to it, so every sidecar would NACK the push; set it in each sidecar's own settings file or flags (line 5)"}},
		{"fixed field in a node entry",
			"nodes:\n  a.b:\n    upstream: {address: 127.0.0.1:1}\n",
			[]string{"nodes.a.b.upstream.address: cannot be served by a control plane", "(line 3)"}},
		{"fixed field in the default",
			"default:\n  log: {format: console}\n",
			[]string{"default.log.format: cannot be served by a control plane: the logger is built once at start"}},
		{"namespace twice",
			"namespaces:\n  shop: {}\n  shop: {}\n",
			[]string{"namespaces.shop: set twice (first at line 2) (line 3)"}},
		{"misspelt top-level key",
			"selector: []\n",
			[]string{"selector: unknown field; a control-plane file has default:, namespaces:, selectors: and nodes:; did you mean selectors? (line 1)"}},
		{"a sidecar settings file where a control-plane file belongs",
			"listener: {backlog: 5}\nhold: {timeout: 1s}\n",
			[]string{"this is a sidecar settings file (its top level is listener: ...), not a control-plane file; to serve these settings to every node, indent them under default: (line 1)"}},
		{"cross-field rule broken by a selector over the default",
			"default:\n  upstream: {backoff_max: 1s}\nselectors:\n" + sel("a", "{labels: {app: x}}", "{upstream: {backoff_base: 2s}}"),
			[]string{"selectors.a.upstream.backoff_max: 1s is below upstream.backoff_base (2s)"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.yaml)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n  %v\ndoes not contain\n  %s", err, w)
				}
			}
		})
	}
}

// Overlapping selectors that are fine: ordered by specificity, disjoint
// fields, equal values, a third selector settling the conflict, selectors
// that can never match the same node.
func TestSelectorsAccepted(t *testing.T) {
	sel := func(name, match, settings string) string {
		return "  - name: " + name + "\n    match: " + match + "\n    settings: " + settings + "\n"
	}
	cases := []struct{ name, yaml string }{
		{"more specific wins", sel("a", "{labels: {app: p}}", "{hold: {timeout: 1s}}") +
			sel("b", "{labels: {app: p, track: c}}", "{hold: {timeout: 2s}}")},
		{"disjoint fields", sel("a", "{labels: {app: p}}", "{hold: {timeout: 1s}}") +
			sel("b", "{labels: {track: c}}", "{log: {level: debug}}")},
		{"same value", sel("a", "{labels: {app: p}}", "{hold: {timeout: 1s}}") +
			sel("b", "{labels: {track: c}}", "{hold: {timeout: 1s}}")},
		{"settled by the combined selector", sel("a", "{labels: {app: p}}", "{hold: {timeout: 1s}}") +
			sel("b", "{labels: {track: c}}", "{hold: {timeout: 2s}}") +
			sel("ab", "{labels: {app: p, track: c}}", "{hold: {timeout: 3s}}")},
		{"never the same node (label values)", sel("a", "{labels: {app: p}}", "{hold: {timeout: 1s}}") +
			sel("b", "{labels: {app: q}}", "{hold: {timeout: 2s}}")},
		{"never the same node (namespaces)", sel("a", "{namespace: x, labels: {app: p}}", "{hold: {timeout: 1s}}") +
			sel("b", "{namespace: y, labels: {app: p}}", "{hold: {timeout: 2s}}")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Parse([]byte("selectors:\n" + c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "settled by the combined selector" {
				r := f.Resolve(xds.NodeInfo{ID: "n", Labels: map[string]string{"app": "p", "track": "c"}})
				if got := r.Overlay.GetHold().GetTimeout().AsDuration(); got != 3*time.Second {
					t.Errorf("hold.timeout %v, want the combined selector's 3s (from %v)", got, r.From)
				}
			}
		})
	}
}

// Two files of one directory: each conflict names both files.
func TestControlPlaneDirectoryCrossFile(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"node in two files", map[string]string{
			"10-a.yaml": "nodes:\n  p-0.shop: {hold: {timeout: 1s}}\n",
			"20-b.yaml": "default: {}\nnodes:\n  p-0.shop: {hold: {timeout: 2s}}\n"},
			"nodes.p-0.shop: defined in two files: also at 10-a.yaml line 2; keep one (20-b.yaml line 3)"},
		{"namespace in two files", map[string]string{
			"10-a.yaml": "namespaces:\n  shop: {}\n",
			"20-b.yaml": "namespaces:\n  shop: {}\n"},
			"namespaces.shop: defined in two files: also at 10-a.yaml line 2; keep one (20-b.yaml line 2)"},
		{"selector name in two files", map[string]string{
			"10-a.yaml": "selectors:\n  - name: s\n    match: {labels: {app: a}}\n    settings: {}\n",
			"20-b.yaml": "selectors:\n  - name: s\n    match: {labels: {app: b}}\n    settings: {}\n"},
			"selectors.s: defined in two files: also at 10-a.yaml line 2; keep one (20-b.yaml line 2)"},
		{"selectors in two files that cannot be ordered", map[string]string{
			"10-a.yaml": "selectors:\n  - name: pay\n    match: {labels: {app: payment}}\n    settings: {hold: {timeout: 1s}}\n",
			"20-b.yaml": "selectors:\n  - name: canary\n    match: {labels: {track: canary}}\n    settings: {hold: {timeout: 2s}}\n"},
			"selectors.canary: overlaps selectors.pay (10-a.yaml line 2)"},
		{"entry invalid over the merged default", map[string]string{
			"10-a.yaml": "default:\n  upstream: {backoff_max: 1s}\n",
			"20-b.yaml": "nodes:\n  n: {upstream: {backoff_base: 2s}}\n"},
			"nodes.n.upstream.backoff_max: 1s is below upstream.backoff_base (2s); must be at least upstream.backoff_base (20-b.yaml line 2)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for n, body := range c.files {
				writeFile(t, filepath.Join(dir, n), body)
			}
			err := Validate(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got  %v\nwant %s", err, c.want)
			}
			if c.name == "selectors in two files that cannot be ordered" && !strings.Contains(err.Error(), "(20-b.yaml line 2)") {
				t.Errorf("the problem must point at the second file too: %v", err)
			}
		})
	}
}

func TestIsControlPlaneConfig(t *testing.T) {
	dir := t.TempDir()
	for name, want := range map[string]bool{
		"cp.yaml":       true,
		"sel.yaml":      true,
		"settings.yaml": false,
		"missing.yaml":  false,
	} {
		switch name {
		case "cp.yaml":
			writeFile(t, filepath.Join(dir, name), "nodes: {}\n")
		case "sel.yaml":
			writeFile(t, filepath.Join(dir, name), "selectors: []\n")
		case "settings.yaml":
			writeFile(t, filepath.Join(dir, name), "hold: {timeout: 1s}\n")
		}
		if got := IsConfig(filepath.Join(dir, name)); got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if !IsConfig(dir) {
		t.Errorf("a directory is a control-plane config")
	}
}

// Kubernetes mounts a ConfigMap as symlinks into a hidden ..data directory;
// the control plane reads the links and skips the hidden entries.
func TestControlPlaneDirectoryConfigMapLayout(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_01_01_00_00_00.000000001")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(data, "control-plane.yaml"), "nodes:\n  a: {hold: {timeout: 2s}}\n")
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "control-plane.yaml"), filepath.Join(dir, "control-plane.yaml")); err != nil {
		t.Fatal(err)
	}
	_, f, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.NodeIDs(), []string{"a"}) {
		t.Fatalf("nodes %v", f.NodeIDs())
	}
}

func TestControlPlaneFileErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"default:\n  keepalive: {upstream_interval: -1s}\n", "default.keepalive.upstream_interval: -1s is negative; must be between 1s and 1h (line 2)"},
		{"nodes:\n  a.b:\n    upstream: {connections: 0}\n", "nodes.a.b.upstream.connections: 0 is too small"},
		{"nodes:\n  a.b:\n    upstream: {conections: 2}\n", "nodes.a.b.upstream.conections: unknown field; did you mean connections?"},
		{"defaults: {}\n", "defaults: unknown field"},
		{"nodes: [a]\n", "nodes: must be a mapping"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
	for _, ok := range []string{"default: {}\n", "nodes: {}\n"} {
		if _, err := Parse([]byte(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	// A bad default is reported once, not once per node.
	_, err := Parse([]byte("default: {log: {level: x}}\nnodes: {a: {}, b: {}}\n"))
	var ps settings.Problems
	if !errors.As(err, &ps) || len(ps) != 1 {
		t.Fatalf("want 1 problem, got %v", err)
	}
}

// examples/control-plane.yaml is valid and resolves as its comments say.
func TestExampleControlPlaneFile(t *testing.T) {
	if err := Validate("../../../examples/control-plane.yaml"); err != nil {
		t.Fatal(err)
	}
	cp, err := Load("../../../examples/control-plane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cp.For("order-provider-0.shop").GetUpstream().GetConnections(); got != 8 {
		t.Fatalf("node override not applied: connections=%d", got)
	}
	if got := cp.For("unknown.node").GetUpstream().GetConnections(); got != 4 {
		t.Fatalf("unknown node must get the default: connections=%d", got)
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
