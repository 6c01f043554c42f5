package build

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// RunbookBase is the prefix of every alert's runbook_url. docs/operations.md ("Alerts and runbook
// links") tells operators how to point it at their own copy of the docs.
const RunbookBase = "https://github.com/stormgate/stormgate/blob/main/docs/operations.md#"

var recordRef = regexp.MustCompile(`stormgate:[a-z0-9_:]+`)

type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert, Record, Expr, For string
			Labels                   map[string]string
			Annotations              map[string]string
		}
	}
}

type ruleTests struct {
	RuleFiles          []string `json:"rule_files"`
	EvaluationInterval string   `json:"evaluation_interval"`
	Tests              []struct {
		Name          string
		Interval      string
		InputSeries   []struct{ Series, Values string } `json:"input_series"`
		AlertRuleTest []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string
			ExpAlerts []struct {
				ExpLabels      map[string]string `json:"exp_labels"`
				ExpAnnotations map[string]string `json:"exp_annotations"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAlertRules checks what promtool cannot: every alert has a severity, a summary and a runbook_url
// that is a URL into a heading of docs/operations.md; every metric it reads is one Stormgate exports;
// and the promtool unit tests (make alerts) cover every alert both ways: at least one evaluation where
// it fires and one where it must stay quiet.
func TestAlertRules(t *testing.T) {
	var rules ruleFile
	readYAML(t, filepath.Join("..", "deploy", "prometheus", "stormgate-alerts.yaml"), &rules)
	var tests ruleTests
	readYAML(t, filepath.Join("..", "deploy", "prometheus", "stormgate-alerts.test.yaml"), &tests)
	if !slices.Equal(tests.RuleFiles, []string{"stormgate-alerts.yaml"}) {
		t.Errorf("the unit tests load %v, want [stormgate-alerts.yaml]", tests.RuleFiles)
	}
	ops, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := headingAnchors(string(ops))
	if !strings.Contains(string(ops), strings.TrimSuffix(RunbookBase, "operations.md#")) {
		t.Errorf("docs/operations.md does not explain the runbook base URL %s", RunbookBase)
	}

	fires, quiet := map[string]int{}, map[string]int{}
	for _, tg := range tests.Tests {
		for _, at := range tg.AlertRuleTest {
			if len(at.ExpAlerts) == 0 {
				quiet[at.Alertname]++
			} else {
				fires[at.Alertname]++
			}
		}
	}

	var exprs strings.Builder
	var alerts []string
	for _, g := range rules.Groups {
		recorded := map[string]bool{} // earlier in this group
		for _, r := range g.Rules {
			exprs.WriteString(r.Expr + "\n")
			// Groups are evaluated independently (promtool: in random order); only within a group
			// is a rule sure to see the value recorded at the same evaluation. A recording rule in
			// another group made the unit tests flaky (seen: 1 run in 5).
			for _, ref := range recordRef.FindAllString(r.Expr, -1) {
				if !recorded[ref] {
					t.Errorf("rule %s%s in group %s reads %s, which is not recorded earlier in the same group", r.Alert, r.Record, g.Name, ref)
				}
			}
			if r.Record != "" {
				recorded[r.Record] = true
				continue
			}
			alerts = append(alerts, r.Alert)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s lacks a severity, a summary or a description", r.Alert)
			}
			u := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(u, RunbookBase)
			if !ok {
				t.Errorf("alert %s: runbook_url %q does not start with %s", r.Alert, u, RunbookBase)
			} else if !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q: #%s is not a heading of docs/operations.md", r.Alert, u, anchor)
			}
			if fires[r.Alert] == 0 {
				t.Errorf("alert %s: no promtool test where it fires", r.Alert)
			}
			if quiet[r.Alert] == 0 {
				t.Errorf("alert %s: no promtool test where it must stay quiet", r.Alert)
			}
			if !strings.Contains(string(ops), "`"+r.Alert+"`") {
				t.Errorf("alert %s is not named in docs/operations.md", r.Alert)
			}
		}
	}
	// The converse: every alert name the runbooks give exists (a renamed alert leaves none behind).
	for _, m := range regexp.MustCompile("`(Stormgate[A-Z][A-Za-z]+)`").FindAllStringSubmatch(string(ops), -1) {
		if !slices.Contains(alerts, m[1]) {
			t.Errorf("docs/operations.md names alert %s, which the rules do not define", m[1])
		}
	}
	for name := range fires {
		if !slices.Contains(alerts, name) {
			t.Errorf("the unit tests expect alert %s, which the rules do not define", name)
		}
	}
	checkMetrics(t, "alert rules", exprs.String(), definedMetrics(t))
	t.Logf("alerts %v", alerts)
}
