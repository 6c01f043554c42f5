package main

import (
	"fmt"
	"time"
)

// The sections on real consumers (issues 22 and 23): consumers that give up on a call, and
// greedy neighbours.

func (p *reporter) giveUpRow(tg string, timeout time.Duration) *GiveUpRow {
	if p.r.GiveUp == nil {
		return nil
	}
	return find(p.r.GiveUp.Rows, func(x *GiveUpRow) bool { return x.Target == tg && x.Timeout == timeout && x.Error == "" })
}

func (p *reporter) greedyRow(tg, kind string) *GreedyRow {
	if p.r.Greedy == nil {
		return nil
	}
	return find(p.r.Greedy.Rows, func(x *GreedyRow) bool { return x.Target == tg && x.Neighbours == kind && x.Error == "" })
}

// consumersSummaryRows are the summary's rows for the give-up and greedy scenarios.
func (p *reporter) consumersSummaryRows() []sumRow {
	var rows []sumRow
	if g := p.r.GiveUp; g != nil {
		for _, timeout := range g.Timeouts {
			cell := func(tg string) string {
				x := p.giveUpRow(tg, timeout)
				if x == nil {
					return na
				}
				return fmt.Sprintf("%s of %s failed, %s ran after their consumer gave up", count(uint64(x.Failed)),
					count(uint64(x.Sent)), count(uint64(x.RanAfterGiveUp)))
			}
			x := p.giveUpRow(stormgate, timeout)
			rows = append(rows, sumRow{
				figure: fmt.Sprintf("Provider restart taking %s (SIGKILL, started again %s later), dubbo-go consumer with a %s timeout",
					dur(g.Down), dur(g.Down), dur(timeout)),
				d: cell(direct), h: cell(haproxy), s: cell(stormgate), target: "0 ran after their consumer gave up, none twice",
				known: x != nil, ok: x != nil && x.RanAfterGiveUp == 0 && x.RanTwice == 0,
				note: "A call Stormgate held past its consumer's deadline was sent to the restarted provider: see section 11.",
			})
		}
	}
	if g := p.r.Greedy; g != nil {
		for _, kind := range []string{neverReading, bulkSenders} {
			cell := func(tg string) string {
				x := p.greedyRow(tg, kind)
				if x == nil {
					return na
				}
				return fmt.Sprintf("p99 %s, %s failed", msStr(x.P99ms), count(x.Failed))
			}
			d, s := p.greedyRow(direct, kind), p.greedyRow(stormgate, kind)
			ok := d != nil && s != nil && s.Failed == 0 && s.P99ms <= 1.5*d.P99ms+5
			rows = append(rows, sumRow{
				figure: fmt.Sprintf("Well-behaved p99 with %d greedy neighbours (%s, %s requests): %d consumers, %s req/s of 1 KiB",
					g.Greedy, kind, kib(g.Size), g.Conns, num(g.Rate, 0)),
				d: cell(direct), h: cell(haproxy), s: cell(stormgate), target: "Stormgate ≤ 1.5 × direct + 5 ms, 0 failed",
				known: d != nil && s != nil, ok: ok,
				note: text("note-greedy"),
			})
		}
	}
	return rows
}

// kib formats a byte count in KiB or MiB.
func kib(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

func (p *reporter) giveUpSection() {
	type row struct {
		Timeout     time.Duration
		Target, Err string
		X           *GiveUpRow
	}
	d := struct {
		G           *GiveUpResult
		DubboGo, SG string
		Rows        []row
		Commands    []string
	}{G: p.r.GiveUp, DubboGo: p.r.Machine.DubboGo, SG: stormgate}
	if g := d.G; g != nil {
		for _, timeout := range g.Timeouts {
			for _, tg := range targets {
				x := p.giveUpRow(tg, timeout)
				d.Rows = append(d.Rows, row{timeout, tg, p.giveUpErr(tg, timeout), x})
				if x != nil && timeout == g.Timeouts[0] {
					d.Commands = append(d.Commands, x.Command)
				}
			}
		}
	}
	p.exec("giveup", d)
}

func (p *reporter) giveUpErr(tg string, timeout time.Duration) string {
	for _, x := range p.r.GiveUp.Rows {
		if x.Target == tg && x.Timeout == timeout && x.Error != "" {
			return ": " + oneLine(x.Error)
		}
	}
	return ""
}

func (p *reporter) greedySection() {
	type row struct {
		Kind, Target string
		X            *GreedyRow
	}
	d := struct {
		G         *GreedyResult
		Lead      time.Duration
		Upstreams int
		Bulk      string
		Rows      []row
		Commands  []string
	}{G: p.r.Greedy, Lead: greedyLead, Upstreams: stormgateUpstreamConns, Bulk: bulkSenders}
	if d.G != nil {
		for _, kind := range greedyKinds {
			for _, tg := range targets {
				x := p.greedyRow(tg, kind)
				d.Rows = append(d.Rows, row{kind, tg, x})
				if x != nil && kind == bulkSenders {
					d.Commands = append(d.Commands, x.Command, x.Greedy)
				}
			}
		}
	}
	p.exec("greedy", d)
}
