package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stormgate/stormgate/xds/fleet"
)

// Markers around the sections `suite run --update-section` (make fleet) may rewrite alone.
const (
	fleetBegin = "<!-- section:fleet begin (make bench, or make fleet alone) -->"
	fleetEnd   = "<!-- section:fleet end -->"
)

// fleetSection is scenario 6, between its markers.
func (p *reporter) fleetSection() {
	type change struct {
		fleet.Change
		Where string
	}
	d := struct {
		F                            *FleetResult
		Scale                        *FleetRun
		Begin, End, Command, Started string
		ByOther                      bool
		Changes                      []change
		Verdicts                     string
		Shared, PerNode              *MicroRow
		Failures, Commands           []string
	}{F: p.r.Fleet, Begin: fleetBegin, End: fleetEnd, Command: p.r.Command, Started: p.r.Started.UTC().Format("2006-01-02 15:04"),
		ByOther: p.r.Command != "make bench"}
	if f := d.F; f != nil && f.Scale != nil {
		sc := f.Scale
		d.Scale = sc
		for _, c := range sc.Changes {
			d.Changes = append(d.Changes, change{c, fmt.Sprintf("%s nodes, 1 replica", count(uint64(sc.Nodes)))})
		}
		if fo := f.Failover; fo != nil {
			two := fmt.Sprintf("%s nodes, 2 replicas", count(uint64(fo.Nodes)))
			for _, c := range fo.Changes {
				d.Changes = append(d.Changes, change{c, two})
			}
			if fo.Failover != nil {
				d.Changes = append(d.Changes, change{fo.Failover.After, two})
			}
		}
		v := &reporter{r: p.r}
		v.fleetVerdicts()
		d.Verdicts = v.b.String()
		if len(f.Publish) == 2 {
			d.Shared, d.PerNode = &f.Publish[0], &f.Publish[1]
			if strings.HasPrefix(d.Shared.Name, "Publish/per-node") {
				d.Shared, d.PerNode = d.PerNode, d.Shared
			}
		}
		for _, run := range []*FleetRun{f.Scale, f.Failover} {
			if run == nil {
				continue
			}
			for _, fl := range run.Failures {
				d.Failures = append(d.Failures, "FAILED: "+oneLine(fl))
			}
			if run.Error != "" {
				d.Failures = append(d.Failures, "Error: "+oneLine(run.Error))
			}
			d.Commands = append(d.Commands, run.Command)
		}
		if f.PublishCommand != "" {
			d.Commands = append(d.Commands, f.PublishCommand)
		}
	}
	p.exec("fleet", d)
}

// fleetVerdicts compares the run with issue 15's acceptance figures.
func (p *reporter) fleetVerdicts() {
	f := p.r.Fleet
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	var worst float64
	allAcked, nacks, leaks := true, 0, 0
	var runs []fleet.Change
	if f.Scale != nil {
		runs = append(runs, f.Scale.Changes...)
	}
	if f.Failover != nil {
		runs = append(runs, f.Failover.Changes...)
		if f.Failover.Failover != nil {
			runs = append(runs, f.Failover.Failover.After)
		}
	}
	for _, c := range runs {
		allAcked = allAcked && !c.TimedOut && c.Acked == c.Affected
		nacks += c.NACKs
		leaks += c.UnaffApply
	}
	if f.Scale != nil {
		for _, c := range f.Scale.Changes {
			if c.Unaffected == 0 {
				worst = max(worst, c.P99ms)
			}
		}
	}
	p.ln("| Issue 15 acceptance | Measured | Verdict |")
	p.ln("|---|---|---|")
	if f.Scale != nil {
		p.f("| %s nodes: a change affecting all is ACKed by all within 2 s p99 | worst p99 %s (every change ACKed by every affected node: %v) | %s |\n",
			count(uint64(f.Scale.Nodes)), msStr(worst), allAcked, verdict(allAcked && worst > 0 && worst <= 2000))
	}
	p.f("| a change to one selector reaches only its nodes | nodes outside it that received anything: %d | %s |\n", leaks, verdict(leaks == 0))
	p.f("| 0 NACKs for valid changes | %d | %s |\n", nacks, verdict(nacks == 0))
	if fo := f.Failover; fo != nil && fo.Failover != nil {
		x := fo.Failover
		p.f("| %s nodes, two replicas, one killed: all on the other within 10 s, no settings changed | last one after %s, settings changed on %d nodes | %s |\n",
			count(uint64(fo.Nodes)), msStr(x.MaxMs), x.SettingsChanged, verdict(x.AllConnected && x.MaxMs <= 10000 && x.SettingsChanged == 0))
	}
	p.ln("")
}

// updateSections replaces, in the doc at path, the sections that the scenarios in r have of
// their own (fleet; restart, with its summary rows and its plot), keeping everything else.
func updateSections(r *Results, path, imgDir string) error {
	if r.Fleet == nil && r.Restart == nil && r.TripleIdle == nil && r.TriplePing == nil && r.TripleForward == nil && r.TripleRestart == nil && r.TripleStorm == nil {
		return errors.New("--update-section: only the fleet, restart and triple-* scenarios have sections of their own; run one of them (--scenarios fleet, restart or triple-idle,triple-ping,triple-forward,triple-restart,triple-storm)")
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(path), imgDir)
	if err != nil {
		rel = imgDir
	}
	doc := string(old)
	for _, sc := range scenarios {
		if sc.update == nil {
			continue
		}
		if doc, err = sc.update(&reporter{r: r, img: filepath.ToSlash(rel)}, doc, imgDir); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}

// updateFleetSection rewrites section 6 of doc when r measured the fleet.
func updateFleetSection(p *reporter, doc, _ string) (string, error) {
	if p.r.Fleet == nil {
		return doc, nil
	}
	p.fleetSection()
	return spliceSection(doc, fleetBegin, fleetEnd, strings.TrimRight(p.b.String(), "\n")), p.err
}

// updateRestartSection rewrites section 4 of doc, the summary's restart rows and restart.svg
// when r measured the restart.
func updateRestartSection(p *reporter, doc, imgDir string) (string, error) {
	if p.r.Restart == nil {
		return doc, nil
	}
	p.restartSection()
	doc = spliceSection(doc, restartBegin, restartEnd, strings.TrimRight(p.b.String(), "\n"))
	doc = spliceSummaryRows(doc, p, p.restartSummaryRows())
	if p.err != nil {
		return "", p.err
	}
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return "", err
	}
	return doc, os.WriteFile(filepath.Join(imgDir, "restart.svg"), p.plots()["restart.svg"], 0o644)
}

// spliceSummaryRows replaces, in the doc's summary table, the rows whose figure starts as one
// of rows' (up to its first comma or parenthesis); a row the doc lacks goes after the row placed
// before it, the first after the table's last "Provider" row.
func spliceSummaryRows(doc string, p *reporter, rows []sumRow) string {
	lines := strings.Split(doc, "\n")
	last := -1 // the line of the row placed last
	for _, r := range rows {
		p.b.Reset()
		p.summaryLine(r)
		line := strings.TrimRight(p.b.String(), "\n")
		key := "| " + r.figure[:strings.IndexAny(r.figure+",", ",(")]
		done := false
		for i, l := range lines {
			if strings.HasPrefix(l, key) {
				lines[i], done, last = line, true, i
				break
			}
		}
		if done {
			continue
		}
		at := last
		for i := len(lines) - 1; i >= 0 && at < 0; i-- {
			if strings.HasPrefix(lines[i], "| Provider ") {
				at = i
			}
		}
		if at >= 0 {
			lines = append(lines[:at+1], append([]string{line}, lines[at+1:]...)...)
			last = at + 1
		}
	}
	return strings.Join(lines, "\n")
}

// Markers of the Triple section, which the Triple scenarios alone may rewrite.
const (
	tripleBegin = "<!-- section:triple begin (make bench, or the triple-* scenarios alone) -->"
	tripleEnd   = "<!-- section:triple end -->"
)

// tripleSubBegin and tripleSubEnd mark one Triple scenario's subsection inside section 13.
func tripleSubBegin(name string) string { return "<!-- section:" + name + " begin -->" }
func tripleSubEnd(name string) string   { return "<!-- section:" + name + " end -->" }

// updateTripleSection rewrites, in doc, the subsections of section 13 and the summary rows of the
// Triple scenarios r measured; the other scenarios' subsections and rows stay as they were (a run
// of triple-forward alone leaves the restart rows of an earlier run in place).
func updateTripleSection(p *reporter, doc, _ string) (string, error) {
	if !p.tripleRan() {
		return doc, nil
	}
	p.tripleSection()
	fresh := strings.TrimRight(p.b.String(), "\n")
	var rows []sumRow
	for _, x := range tripleParts {
		if x.ran(p.r) {
			rows = append(rows, x.rows(p)...)
			continue
		}
		if old, ok := markedText(doc, tripleSubBegin(x.name), tripleSubEnd(x.name)); ok {
			fresh = spliceSection(fresh, tripleSubBegin(x.name), tripleSubEnd(x.name), old)
		}
	}
	doc = spliceSection(doc, tripleBegin, tripleEnd, fresh)
	doc = spliceSummaryRows(doc, p, rows)
	return doc, p.err
}

// markedText is doc's text from begin to end, both markers included, when it has them in that order.
func markedText(doc, begin, end string) (string, bool) {
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", false
	}
	return doc[i : j+len(end)], true
}
