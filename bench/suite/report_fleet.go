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
	p.ln(fleetBegin)
	p.ln("## 6. Control plane at fleet scale")
	p.ln("")
	f := p.r.Fleet
	if p.r.Command != "make bench" && f != nil {
		p.f("Measured by `%s`, started %s UTC (the rest of this page may come from another run).\n\n", p.r.Command,
			p.r.Started.UTC().Format("2006-01-02 15:04"))
	}
	p.ln("`stormbench xds-fleet` runs N real Stormgate xDS clients (the `xds` package's ADS client that `sidecar run --xds` uses, one HTTP/2 connection each) in worker processes, against real `sidecar control-plane` processes it starts on loopback, and writes changes to the control-plane file they read. Node *i* reports namespace `ns-((i÷10) mod 5)` and label `app=app-(i mod 10)`; the file has a default, one namespace entry and one selector per app. A change's time is from the file write (atomic rename, as a ConfigMap update) until the node applied the new version and sent its ACK, so it includes the control plane's 500 ms file poll (250 ms on average). The control plane's own share, publish to ACK, is from its `stormgate_control_plane_ack_duration_seconds` histogram (the bucket bound holding the p99). CPU and RSS are the control plane's (`process_*` on its /metrics); everything shares the two cores.")
	p.ln("")
	if f == nil || f.Scale == nil {
		p.ln("Not measured in this run.")
		p.ln("")
		p.ln(fleetEnd)
		p.ln("")
		return
	}
	sc := f.Scale
	p.f("**%s nodes, one control plane** (%d worker processes): every node had applied its first settings %.1f s after the first client started (clients started at 2,000/s). Control-plane RSS %s MiB before any node, %s MiB with all connected: **%s KiB per connected node** (Go heap %s KiB of it; the rest is mostly the goroutine stacks of gRPC and go-control-plane, five per stream). Idle CPU with every node connected: %s. %s distinct settings versions, each one shared snapshot.\n\n",
		count(uint64(sc.Nodes)), sc.Workers, sc.ConnectS, num(sc.RSSBeforeMiB, 1), num(sc.RSSAfterMiB, 1), num(sc.RSSPerNodeKiB, 1),
		num(sc.HeapPerNodeKB, 1), pctCore(sc.IdleCPU), num(sc.Versions, 0))
	p.ln("| Change | Nodes affected | ACKed | p50 | p99 | max | Control plane publish→ACK p99 | Pushes sent | Control-plane CPU | CPU per pushed node | NACKs | Other nodes that received anything |")
	p.ln("|---|---|---|---|---|---|---|---|---|---|---|---|")
	changes := append([]fleet.Change(nil), sc.Changes...)
	if fo := f.Failover; fo != nil {
		changes = append(changes, fo.Changes...)
		if fo.Failover != nil {
			changes = append(changes, fo.Failover.After)
		}
	}
	for i, c := range changes {
		where := fmt.Sprintf("%s nodes, 1 replica", count(uint64(sc.Nodes)))
		if i >= len(sc.Changes) && f.Failover != nil {
			where = fmt.Sprintf("%s nodes, 2 replicas", count(uint64(f.Failover.Nodes)))
		}
		acked := count(uint64(c.Acked))
		if c.TimedOut {
			acked += " (timed out)"
		}
		p.f("| %s (%s) | %s | %s | %s | %s | %s | ≤ %s | %s | %s s | %s µs | %d | %s of %s |\n", c.Name, where, count(uint64(c.Affected)), acked,
			msStr(c.P50ms), msStr(c.P99ms), msStr(c.MaxMs), msStr(c.CPP99ms), num(c.Pushes, 0), num(c.CPUs, 2), num(c.CPUPerNode, 0),
			c.NACKs, count(uint64(c.UnaffApply)), count(uint64(c.Unaffected)))
	}
	p.ln("")
	if fo := f.Failover; fo != nil && fo.Failover != nil {
		x := fo.Failover
		p.f("**%s nodes, two replicas, one killed**: the replica holding the most nodes (%s) was SIGKILLed. Each of them was connected to the other replica after p50 %s, p99 %s, max **%s** (every node connected elsewhere: %v); nodes whose settings changed in between: **%d** (the survivor serves the same content-hash version, so a reconnect changes nothing). The next change was ACKed by %s of %s nodes, p99 %s after the write.\n\n",
			count(uint64(fo.Nodes)), count(uint64(x.NodesOnKilled)), msStr(x.P50ms), msStr(x.P99ms), msStr(x.MaxMs), x.AllConnected,
			x.SettingsChanged, count(uint64(x.After.Acked)), count(uint64(x.After.Affected)), msStr(x.After.P99ms))
	}
	p.fleetVerdicts()
	if len(f.Publish) == 2 {
		sh, pn := f.Publish[0], f.Publish[1]
		if strings.HasPrefix(sh.Name, "Publish/per-node") {
			sh, pn = pn, sh
		}
		p.f("Why shared snapshots (`BenchmarkPublish` in xds): the control plane's work for a change affecting 5,000 connected nodes, up to handing each its new snapshot, is %s ms with one snapshot per distinct settings shared by the nodes that resolve to it, against %s ms building one per node (%s vs %s allocations). Delta xDS would not save more: each node has exactly one resource, so a delta response carries the same one resource a state-of-the-world response does. What remains per node (marshalling its response, gRPC, its ACK, its log line) is the CPU per pushed node above.\n\n",
			num(sh.NsOp/1e6, 1), num(pn.NsOp/1e6, 1), num(sh.AllocsOp, 0), num(pn.AllocsOp, 0))
	}
	for _, run := range []*FleetRun{f.Scale, f.Failover} {
		if run == nil {
			continue
		}
		for _, fl := range run.Failures {
			p.ln("- FAILED: " + oneLine(fl))
		}
		if run.Error != "" {
			p.ln("- Error: " + oneLine(run.Error))
		}
	}
	var cmds []string
	for _, run := range []*FleetRun{f.Scale, f.Failover} {
		if run != nil {
			cmds = append(cmds, run.Command)
		}
	}
	if f.PublishCommand != "" {
		cmds = append(cmds, f.PublishCommand)
	}
	p.cmds("Commands (make build puts sidecar and stormbench in bin/)", cmds)
	p.ln(fleetEnd)
	p.ln("")
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
	if r.Fleet == nil && r.Restart == nil {
		return errors.New("--update-section: only the fleet and restart scenarios have sections of their own; run one of them (--scenarios fleet or restart)")
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
// of rows' (up to its first comma or parenthesis), or appends them after the last such row.
func spliceSummaryRows(doc string, p *reporter, rows []sumRow) string {
	lines := strings.Split(doc, "\n")
	for _, r := range rows {
		p.b.Reset()
		p.summaryLine(r)
		line := strings.TrimRight(p.b.String(), "\n")
		key := "| " + r.figure[:strings.IndexAny(r.figure+",", ",(")]
		done := false
		for i, l := range lines {
			if strings.HasPrefix(l, key) {
				lines[i], done = line, true
				break
			}
		}
		if !done {
			for i := len(lines) - 1; i >= 0; i-- {
				if strings.HasPrefix(lines[i], "| Provider ") {
					lines = append(lines[:i+1], append([]string{line}, lines[i+1:]...)...)
					break
				}
			}
		}
	}
	return strings.Join(lines, "\n")
}
