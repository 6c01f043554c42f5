package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestPatchSetVerdicts: a figure within its target is met; one outside says by how much, in the
// target's unit and as a share of the target; a bound decides only from the right side.
func TestPatchSetVerdicts(t *testing.T) {
	atMost := limit{value: 1.25, text: "≤ 1.25×", unit: ratioUnit}
	atLeast := limit{value: 1.5, atLeast: true, text: "≥ 1.50×", unit: ratioUnit}
	kib := limit{value: 3, text: "≤ 3.0 KiB", unit: kibStr}
	for _, c := range []struct {
		name   string
		l      limit
		v      float64
		b      valueBound
		want   string
		missed bool
	}{
		{"at most, below", atMost, 1.2, exactValue, "**met**", false},
		{"at most, on the target", atMost, 1.25, exactValue, "**met**", false},
		{"at most, above", atMost, 1.40, exactValue, "**missed** by 0.15× (12 % over the target)", true},
		{"at least, above", atLeast, 1.6, exactValue, "**met**", false},
		{"at least, below", atLeast, 1.25, exactValue, "**missed** by 0.25× (17 % under the target)", true},
		{"KiB", kib, 4.4, exactValue, "**missed** by 1.4 KiB (47 % over the target)", true},
		{"not measured", atMost, math.NaN(), exactValue, "not measured", false},
		{"lower bound above an at-least target", atLeast, 4, lowerBound, "**met**", false},
		{"lower bound below an at-least target", atLeast, 1.2, lowerBound, "no verdict: only a bound (> 1.20×)", false},
		{"upper bound below an at-least target", atLeast, 1.2, upperBound, "**missed** by at least 0.30× (20 % under the target)", true},
		{"upper bound above an at-least target", atLeast, 2, upperBound, "no verdict: only a bound (< 2.00×)", false},
		{"lower bound above an at-most target", atMost, 1.3, lowerBound, "**missed** by at least 0.05× (4 % over the target)", true},
	} {
		got, missed := c.l.judge(c.v, c.b)
		if got != c.want || missed != c.missed {
			t.Errorf("%s: judge(%v) = %q, %v; want %q, %v", c.name, c.v, got, missed, c.want, c.missed)
		}
	}
}

// TestPatchSetRows: the table judges the figures the other sections print, and gives the why
// only for a missed target.
func TestPatchSetRows(t *testing.T) {
	r, err := loadResults(filepath.Join("testdata", "render", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	rows := (&reporter{r: r}).patchSetRows()
	if len(rows) != 12 {
		t.Fatalf("%d rows, want 12 (2 heartbeat, 3 per forward load, idle CPU, memory, throughput, p99)", len(rows))
	}
	byFigure := map[string]patchSetRow{}
	for _, x := range rows {
		byFigure[x.Figure] = x
	}
	for fig, want := range map[string][2]string{
		"CPU per heartbeat, Stormgate ÷ the bare epoll responder (section 7)":                             {"1.40× (17.80 µs ÷ 12.83 µs)", "**missed** by 0.15× (12 % over the target)"},
		"Stormgate's own code: CPU per heartbeat, Stormgate ÷ the netpoll responder (section 7)":          {"1.02× (17.80 µs ÷ 17.50 µs)", "**met**"},
		"Proxy CPU with 10,000 idle consumers heartbeating every 30 s, Stormgate ÷ HAProxy (section 1)":   {"0.66× (1.75 % ÷ 2.65 %)", "**met**"},
		"Max throughput, 10,000 conns, Stormgate ÷ HAProxy (section 3)":                                   {"1.33× (40,000 ÷ 30,000 req/s)", "**missed** by 0.17× (11 % under the target)"},
		"System calls per forwarded request (perf stat), Stormgate, 2,000 conns, 4,000 req/s (section 9)": {"10.74", "**missed** by 4.74 (79 % over the target)"},
	} {
		x, ok := byFigure[fig]
		if !ok {
			t.Errorf("no row %q", fig)
			continue
		}
		if x.Measured != want[0] || x.Verdict != want[1] {
			t.Errorf("%s: %q, %q; want %q, %q", fig, x.Measured, x.Verdict, want[0], want[1])
		}
		if x.Verdict == "**met**" && x.Why != "–" {
			t.Errorf("%s: met, with why %q", fig, x.Why)
		}
	}
	// Missed, with the why the summary gives the figure.
	for _, fig := range []string{"CPU per heartbeat, Stormgate ÷ the bare epoll responder (section 7)", "Max throughput, 10,000 conns, Stormgate ÷ HAProxy (section 3)"} {
		if x := byFigure[fig]; !strings.HasPrefix(x.Why, "Per heartbeat Stormgate made") && !strings.HasPrefix(x.Why, "At its maximum Stormgate used") {
			t.Errorf("%s: why %q", fig, x.Why)
		}
	}
}

// TestPatchSetNotMeasured: a run without the scenarios (e.g. --scenarios restart) renders the
// table with every figure not measured.
func TestPatchSetNotMeasured(t *testing.T) {
	r := &Results{}
	rows := (&reporter{r: r}).patchSetRows()
	if len(rows) != 12 {
		t.Fatalf("%d rows, want 12 (issue 28's loads when the run names none)", len(rows))
	}
	for _, x := range rows {
		if x.Verdict != "not measured" || x.Measured != na || x.Why != "–" {
			t.Errorf("%s: %q, %q, %q; want not measured", x.Figure, x.Measured, x.Verdict, x.Why)
		}
	}
	p := &reporter{r: r}
	p.patchSetSection()
	if p.err != nil || !strings.Contains(p.b.String(), "| not measured | – |") {
		t.Errorf("section: %v\n%s", p.err, p.b.String())
	}
}
