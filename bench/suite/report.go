package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeReport writes the markdown doc and its plots from r. The layout depends only on the
// code: every section, table row and plot is always written (with "n/a" where a figure is
// missing), so a re-run changes only the figures.
func writeReport(r *Results, docPath, imgDir string) error {
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(docPath), imgDir)
	if err != nil {
		rel = imgDir
	}
	rp := &reporter{r: r, img: filepath.ToSlash(rel)}
	for name, svg := range rp.plots() {
		if err := os.WriteFile(filepath.Join(imgDir, name), svg, 0o644); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(docPath), 0o755); err != nil {
		return err
	}
	doc := rp.markdown()
	if rp.err != nil {
		return rp.err
	}
	return os.WriteFile(docPath, []byte(keepSections(doc, docPath)), 0o644)
}

// Sections other runs write into the same doc, which make bench keeps as they are: the soak's
// (`suite soak`, Dubbo and Triple) and the upgrade's (make upgrade-bench, issue 14).
const (
	upgradeBegin = "<!-- upgrade:begin (make upgrade-bench writes the figures; make bench keeps this section) -->"
	upgradeEnd   = "<!-- upgrade:end -->"
)

var keptSections = [][2]string{{soakBegin, soakEnd}, {soakTripleBegin, soakTripleEnd}, {upgradeBegin, upgradeEnd}}

// keepSections puts the kept sections of the doc at path into the new doc.
func keepSections(doc, path string) string {
	for _, m := range keptSections {
		if sec := sectionOf(path, m[0], m[1]); sec != "" {
			doc = spliceSection(doc, m[0], m[1], strings.TrimRight(sec, "\n"))
		}
	}
	return doc
}

// spliceSection replaces the text from begin to end (markers included) in doc with section,
// which carries its own markers. A doc without them gets section before its
// "## Load tool overhead" heading, or at its end.
func spliceSection(doc, begin, end, section string) string {
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	switch {
	case i >= 0 && j > i:
		return doc[:i] + section + doc[j+len(end):]
	case strings.Contains(doc, "\n## Load tool overhead"):
		k := strings.Index(doc, "\n## Load tool overhead") + 1
		return doc[:k] + section + "\n\n" + doc[k:]
	case doc == "":
		return section + "\n"
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + section + "\n"
}

type reporter struct {
	r   *Results
	img string // plots directory relative to the doc
	b   strings.Builder
	err error // the first template error
}

func (p *reporter) f(format string, args ...any) { fmt.Fprintf(&p.b, format, args...) }
func (p *reporter) ln(s string)                  { p.b.WriteString(s + "\n") }

// na is how a missing figure prints.
const na = "n/a"

func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return na
	}
	return commas(fmt.Sprintf("%.*f", prec, v))
}

// commas groups the integer part by thousands: 12345.6 → 12,345.6.
func commas(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	intPart, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	out := b.String()
	if hasFrac {
		out += "." + frac
	}
	if neg {
		out = "-" + out
	}
	return out
}

func count(v uint64) string { return commas(fmt.Sprint(v)) }
func pctCore(v float64) string {
	if math.IsNaN(v) {
		return na
	}
	return num(100*v, 1) + " %"
}
func msStr(v float64) string {
	if math.IsNaN(v) {
		return na
	}
	switch {
	case v >= 100:
		return num(v, 0) + " ms"
	case v >= 10:
		return num(v, 1) + " ms"
	default:
		return num(v, 2) + " ms"
	}
}
func dur(d time.Duration) string {
	if d <= 0 {
		return "0 s"
	}
	return num(d.Seconds(), 2) + " s"
}

// ratio prints a ÷ b as "1.25×" (n/a when quotient has none).
func ratio(a, b float64) string {
	q := quotient(a, b)
	if math.IsNaN(q) {
		return na
	}
	return num(q, 2) + "×"
}

// quotient is a ÷ b, NaN when either is missing or b is not positive.
func quotient(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b <= 0 {
		return math.NaN()
	}
	return a / b
}

// verdict compares a figure with a target; ok is the comparison's outcome.
func verdict(known, ok bool) string {
	switch {
	case !known:
		return "not measured"
	case ok:
		return "**met**"
	default:
		return "**missed**"
	}
}

func yesNo(known, loses bool) string {
	switch {
	case !known:
		return na
	case loses:
		return "**yes**"
	default:
		return "no"
	}
}

// --- lookups (NaN when the figure is missing) ---

func (p *reporter) idle(tg string, period time.Duration) *IdleRow {
	if p.r.Idle == nil {
		return nil
	}
	return find(p.r.Idle.Rows, func(x *IdleRow) bool { return x.Target == tg && x.Period == period && x.Error == "" })
}

func (p *reporter) lat(tg, method string) *LatencyRow {
	if p.r.Latency == nil {
		return nil
	}
	return find(p.r.Latency.Rows, func(x *LatencyRow) bool { return x.Target == tg && x.Method == method && x.Error == "" })
}

func (p *reporter) tp(tg string, conns int) *TPSeries {
	if p.r.Throughput == nil {
		return nil
	}
	return find(p.r.Throughput.Series, func(x *TPSeries) bool { return x.Target == tg && x.Conns == conns && x.Error == "" })
}

// maxStep is the passing step at the series' maximum.
func (se *TPSeries) maxStep() *TPStep {
	return find(se.Steps, func(x *TPStep) bool { return x.Pass && x.Rate == se.Max })
}

// restart and graceful are the SIGKILL and SIGTERM restart rows of a target.
func (p *reporter) restart(tg string) *RestartRow {
	if p.r.Restart == nil {
		return nil
	}
	return restartRowOf(p.r.Restart.Rows, tg)
}

func (p *reporter) graceful(tg string) *RestartRow {
	if p.r.Restart == nil {
		return nil
	}
	return restartRowOf(p.r.Restart.Graceful, tg)
}

func (p *reporter) storm(tg string) *StormRow {
	if p.r.Storm == nil {
		return nil
	}
	return find(p.r.Storm.Rows, func(x *StormRow) bool { return x.Target == tg && x.Error == "" })
}

func restartRowOf(rows []RestartRow, tg string) *RestartRow {
	return find(rows, func(x *RestartRow) bool { return x.Target == tg && x.Error == "" })
}

// find is the first of rows that ok accepts, nil when none does.
func find[T any](rows []T, ok func(*T) bool) *T {
	for i := range rows {
		if ok(&rows[i]) {
			return &rows[i]
		}
	}
	return nil
}

func (rr *RestartRow) visibleErrors() uint64 { return rr.Errors + rr.Timeouts + rr.Lost + rr.Unsent }

// nan helpers: a field of a possibly-nil row.
func fIdle(x *IdleRow, get func(*IdleRow) float64) float64 {
	if x == nil {
		return math.NaN()
	}
	return get(x)
}
func fLat(x *LatencyRow, get func(*LatencyRow) float64) float64 {
	if x == nil {
		return math.NaN()
	}
	return get(x)
}
func fTP(x *TPSeries) float64 {
	if x == nil || x.Max == 0 {
		return math.NaN()
	}
	return x.Max
}

var targetTitle = map[string]string{direct: "direct", haproxy: "HAProxy", stormgate: "Stormgate", baseline: "baseline listener",
	stormgateNoLabels: "Stormgate without per-method metrics", stormgateBase: "Stormgate at the base commit",
	armDubbo: "Stormgate, Dubbo heartbeats", armTriple: "Stormgate, h2c PINGs"}

// commonConns picks the throughput connection counts to report: those of the run.
func (p *reporter) tpConns() []int {
	if p.r.Throughput == nil {
		return p.r.Options.TPConns
	}
	var out []int
	seen := map[int]bool{}
	for _, se := range p.r.Throughput.Series {
		if !seen[se.Conns] {
			seen[se.Conns] = true
			out = append(out, se.Conns)
		}
	}
	return out
}
