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
	for i := range p.r.GiveUp.Rows {
		if x := &p.r.GiveUp.Rows[i]; x.Target == tg && x.Timeout == timeout && x.Error == "" {
			return x
		}
	}
	return nil
}

func (p *reporter) greedyRow(tg, kind string) *GreedyRow {
	if p.r.Greedy == nil {
		return nil
	}
	for i := range p.r.Greedy.Rows {
		if x := &p.r.Greedy.Rows[i]; x.Target == tg && x.Neighbours == kind && x.Error == "" {
			return x
		}
	}
	return nil
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
				note: "The neighbours' bytes queued ahead of the well-behaved requests on Stormgate's shared provider connections: see section 12.",
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
	p.ln("## 11. Consumers that give up: a provider restart taking 8 s")
	p.ln("")
	g := p.r.GiveUp
	if g == nil {
		p.ln("Not measured in this run.")
		p.ln("")
		return
	}
	p.f("The real **dubbo-go %s consumer** (`interop/cmd/dgconsumer`: %d workers, each calling Echo with a unique argument and pausing %s between calls) calls the real dubbo-go provider with a per-call timeout, which dubbo-go sends in each request's `timeout` attachment. %s after the consumer starts, the provider is killed with SIGKILL; it is started again on the same port %s later, which with dubbo-go's own start-up makes an outage longer than the shorter timeout. A consumer that gives up on a call has moved on (a Java consumer retries it on another provider, `retries=2`): the call must not run after that. Each provider process logs every call it runs (`dgprovider --log-requests`, the killed and the restarted one to files of their own); *ran after their consumer gave up* are failed calls that the restarted provider ran, *read by the killed provider* are failed calls the killed provider had run (their answers died with it), *ran twice* are calls both providers ran. Stormgate holds a call while the provider is away only until its consumer's deadline less `hold.deadline_margin`, then answers it itself (*answered at the deadline*, never sent).\n\n",
		p.r.Machine.DubboGo, g.Workers, dur(g.Interval), dur(g.KillAt), dur(g.Down))
	p.ln("| Consumer timeout | Target | Calls | OK | Failed | of which timeouts | Ran after their consumer gave up | Read by the killed provider | Ran twice | Answered at the deadline | Provider down for |")
	p.ln("|---|---|---|---|---|---|---|---|---|---|---|")
	var cmds []string
	for _, timeout := range g.Timeouts {
		for _, tg := range targets {
			x := p.giveUpRow(tg, timeout)
			if x == nil {
				p.f("| %s | %s | not measured%s | | | | | | | | |\n", dur(timeout), targetTitle[tg], p.giveUpErr(tg, timeout))
				continue
			}
			atDeadline := "–"
			if tg == stormgate {
				atDeadline = num(x.AnsweredAtDeadline, 0)
			}
			p.f("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", dur(timeout), targetTitle[tg], count(uint64(x.Sent)),
				count(uint64(x.OK)), count(uint64(x.Failed)), count(uint64(x.Timeouts)), count(uint64(x.RanAfterGiveUp)),
				count(uint64(x.ReadByKilled)), count(uint64(x.RanTwice)), atDeadline, dur(x.DownFor))
			if timeout == g.Timeouts[0] {
				cmds = append(cmds, x.Command)
			}
		}
	}
	p.ln("")
	p.ln("Direct and HAProxy fail every call made while the provider is away, at once (the connection is refused or closed), and run none of them later. Stormgate keeps the consumers' connections open: with the long timeout the outage fits in the consumers' patience and the held calls are answered by the restarted provider; with the short one, each held call is answered at its consumer's deadline and never sent.")
	p.ln("")
	p.cmds("Commands (the provider is killed and restarted by the suite; the first timeout shown, the others alike)", cmds)
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
	p.ln("## 12. Greedy neighbours")
	p.ln("")
	g := p.r.Greedy
	if g == nil {
		p.ln("Not measured in this run.")
		p.ln("")
		return
	}
	p.f("Provider: `stormbench echo-provider` reading normally (it answers every checked body with itself). %d well-behaved consumers send %s req/s in total with unique 1 KiB bodies (checked byte for byte) for %s, while %d greedy neighbours push %s requests as fast as TCP lets them (`stormbench greedy`, started %s earlier): *never reading* neighbours write and never read a byte of their answers (a consumer that stopped reading); *bulk senders* read and check theirs. Direct and HAProxy give every consumer a provider connection of its own, so a neighbour can cost the others only the provider's and the machine's time; Stormgate multiplexes everyone onto %d shared provider connections, where only its scheduling (a send queue per consumer served in turn, a bulk lane for large requests, and backpressure that stops reading from a consumer over its bound) keeps the neighbours' bytes from queueing ahead of everyone else's (docs/design.md §3b).\n\n",
		g.Conns, num(g.Rate, 0), dur(g.Duration), g.Greedy, kib(g.Size), dur(greedyLead), stormgateUpstreamConns)
	p.ln("| Neighbours | Target | Sent | OK | Failed | p50 | p99 | max | Neighbours' requests written | answered | closed by the target |")
	p.ln("|---|---|---|---|---|---|---|---|---|---|---|")
	var cmds []string
	for _, kind := range greedyKinds {
		for _, tg := range targets {
			x := p.greedyRow(tg, kind)
			if x == nil {
				p.f("| %s | %s | not measured | | | | | | | | |\n", kind, targetTitle[tg])
				continue
			}
			nbSent, nbAns, nbClosed := "–", "–", "–"
			if nb := x.Neighbour; nb != nil {
				nbSent, nbClosed = count(nb.Sent), fmt.Sprintf("%d of %d", nb.Closed, g.Greedy)
				if kind == bulkSenders {
					nbAns = count(nb.Answered)
				}
			}
			p.f("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", kind, targetTitle[tg], count(x.Sent), count(x.OK),
				count(x.Failed), msStr(x.P50ms), msStr(x.P99ms), msStr(x.MaxMs), nbSent, nbAns, nbClosed)
			if kind == bulkSenders {
				cmds = append(cmds, x.Command, x.Greedy)
			}
		}
	}
	p.ln("")
	p.cmds("Commands (bulk senders; never reading: the same without --read; none: the load alone)", cmds)
}
