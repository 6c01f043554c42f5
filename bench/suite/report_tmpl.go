package main

import (
	"embed"
	"fmt"
	"strings"
	"text/template"
	"time"
)

// The doc's prose and tables are text/template files in templates/, one or more sections per
// file, executed with a section's data as dot. Go code gathers the figures (and formats the
// cells that take logic); the templates say what the page says. The functions below are the
// only formatting the templates do, with the same rules as the Go code's.

//go:embed templates/*.md.tmpl
var templateFiles embed.FS

var reportTemplates = template.Must(template.New("report").Funcs(template.FuncMap{
	"count":    countOf,
	"num":      num,
	"dur":      dur,
	"us":       usStr,
	"ms":       msStr,
	"pctCore":  pctCore,
	"ratio":    ratio,
	"times":    times,
	"verdict":  verdict,
	"title":    func(tg string) string { return targetTitle[tg] },
	"oneLine":  oneLine,
	"details":  func(title string, lines []string) cmdsBlock { return cmdsBlock{title, lines} },
	"pct":      func(frac float64) float64 { return 100 * frac },
	"caller":   callerText,
	"kib":      kib,
	"div":      func(a, b float64) float64 { return a / b },
	"hot":      isHotPath,
	"kibStr":   kibStr,
	"pct100":   func(f float64) float64 { return 100 * f },
	"pipes":    func(s string) string { return strings.ReplaceAll(s, "|", "\\|") },
	"mib":      mib,
	"mibOf":    func(b float64) float64 { return b / (1 << 20) },
	"quiet":    quietAfter,
	"secs":     func(d time.Duration) time.Duration { return d.Round(time.Second) },
	"inc":      func(n int) int { return n + 1 },
	"args":     func(v ...any) []any { return v },
	"firstAt":  firstAt,
	"firstP99": firstP99,
	"firstMax": firstMax,
	// nsPrec: ns/op with one decimal below 100 ns, none above.
	"nsPrec": func(ns float64) int {
		if ns >= 100 {
			return 0
		}
		return 1
	},
	"split": func(pr *Profile) string { return splitText(pr.Split, pr) },
	// shares are the largest shares of a profile (at most kernelRowsShown) under two column titles.
	"shares": func(what, who string, s []Share) any {
		return struct {
			What, Who string
			Shares    []Share
		}{what, who, s[:min(len(s), kernelRowsShown)]}
	},
}).ParseFS(templateFiles, "templates/*.md.tmpl"))

// countOf is count for any integer a template holds.
func countOf(v any) string {
	switch n := v.(type) {
	case int:
		return count(uint64(n))
	case int64:
		return count(uint64(n))
	case uint64:
		return count(n)
	case time.Duration:
		return count(uint64(n))
	}
	panic(fmt.Sprintf("count: %T is not an integer", v))
}

// times prints ratios as "1.52×, 1.61×".
func times(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, num(x, 2)+"×")
	}
	return strings.Join(s, ", ")
}

// targetRow is one target's row of a table; X is nil when the target was not measured.
type targetRow[T any] struct {
	Target string
	X      *T
}

// cmdsBlock is a folded list of command lines under a title (the "cmds" template).
type cmdsBlock struct {
	Title string
	Lines []string
}

// exec appends template name, executed with data, to the doc. The first error is kept for
// writeReport (a template that does not fit its data is the code's mistake: every test renders
// every section).
func (p *reporter) exec(name string, data any) {
	if err := reportTemplates.ExecuteTemplate(&p.b, name, data); err != nil && p.err == nil {
		p.err = fmt.Errorf("report template %s: %w", name, err)
	}
}

func (p *reporter) cmds(title string, lines []string) { p.exec("cmds", cmdsBlock{title, lines}) }

// text is a template of notes.md.tmpl executed with args as dot ({{index . 0}} is the first): the
// long notes of the summary and "where Stormgate loses" tables, whose figures the Go code formats.
// A template that cannot run (a programming error the golden tests catch) says so in the note.
func text(name string, args ...any) string {
	var b strings.Builder
	if err := reportTemplates.ExecuteTemplate(&b, name, args); err != nil {
		return fmt.Sprintf("(report template %s: %v)", name, err)
	}
	return b.String()
}
