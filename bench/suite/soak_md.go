package main

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// The soak's section of docs/benchmarks.md lives between these markers. `suite soak --doc`
// rewrites it; `suite run`/`render`, which regenerate the rest of the file, keep it as it is.
const (
	soakBegin = "<!-- soak:begin -->"
	soakEnd   = "<!-- soak:end -->"
)

// markdown is the soak's section, markers included.
func (r *SoakResult) markdown() string {
	var b strings.Builder
	o := r.Options
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("%s\n## Soak: the integrity invariant over time\n\n", soakBegin)
	p("<!-- Written by `suite soak` (bench/soak.sh); `make bench` keeps this section as it is. -->\n\n")
	verdict := "**passed**"
	if !r.Pass {
		verdict = "**FAILED**"
	}
	p("One run of `%s`, started %s UTC on the machine above (Stormgate %s), %s after %s of wall time. ",
		r.Command, r.Started.UTC().Format("2006-01-02 15:04"), r.Machine.Stormgate, verdict, r.Wall.Round(time.Second))
	p("Real binaries as separate processes: `stormbench echo-provider` (4 KiB receive buffer, 1460-byte MSS, "+
		"reading spells of about %v: %.0f%% slow, %.0f%% stalled; killed and restarted, %v down, every %v; %s), "+
		"`sidecar run` with 4 upstream connections, and %d consumers in %d `stormbench load` processes "+
		"(%g requests/s, %.0f%% one-way, unique checked bodies of %d B to %s, log-uniform; a heartbeat every %v; "+
		"timeout %v) for %v. Seed %d.\n\n",
		o.Spell, 100*o.SlowChance, 100*o.StallChance, o.Down, o.RestartEvery, killWords(o.Kill), o.Conns, o.Workers, o.Rate, 100*o.OneWay,
		o.BodyMin, kibOrMiB(o.BodyMax), o.Heartbeat, o.Timeout, o.Duration, o.Seed)
	p("```sh\n%s\n# load, as the suite ran it (SIDECAR is its listen address):\n%s\n```\n\n", r.Command, r.LoadCommand)
	p("| check | result | figures |\n|---|---|---|\n")
	for _, c := range r.Checks {
		mark := "yes"
		if !c.OK {
			mark = "**no**"
		}
		p("| %s | %s | %s |\n", c.Name, mark, strings.ReplaceAll(c.Detail, "|", "\\|"))
	}
	p("\n")
	if len(r.LocalReplies) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.LocalReplies)) {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, r.LocalReplies[k]))
		}
		p("Error answers came from Stormgate itself (`stormgate_local_replies_total`: %s): requests in flight on a "+
			"provider connection when the provider was killed, or held longer than the hold timeout while it was down.\n\n",
			strings.Join(parts, ", "))
	}
	if r.Warm != nil && r.End != nil {
		p("Sidecar after warm-up (+%v) and at the end (+%v), the same point of the restart cycle, each after the provider "+
			"had read normally for %v (so that neither catches a slow spell's backlog), with the load paused (`stormbench load` "+
			"on SIGUSR1: no new request, heartbeats go on, every connection open) until the sidecar had nothing in flight, held or "+
			"buffered (%s after the pause at warm-up, %s at the end), so that neither counts the requests that happen to be in "+
			"flight; each figure the median of five readings of `/metrics` right after two GCs forced through "+
			"`/debug/pprof/heap?gc=1`:\n\n", r.Warm.At.Round(time.Second), r.End.At.Round(time.Second), o.Calm,
			quietAfter(r.Warm), quietAfter(r.End))
		p("| | after warm-up | end |\n|---|---|---|\n")
		p("| `process_open_fds` | %.0f | %.0f |\n", r.Warm.OpenFDs, r.End.OpenFDs)
		p("| `go_goroutines` | %.0f | %.0f |\n", r.Warm.Goroutines, r.End.Goroutines)
		p("| `go_gc_heap_live_bytes` (what the forced GC found live) | %.1f MiB | %.1f MiB |\n", r.Warm.HeapLive/(1<<20), r.End.HeapLive/(1<<20))
		p("| `go_memstats_heap_inuse_bytes` (for information: also what was allocated after the GC) | %.1f MiB | %.1f MiB |\n", r.Warm.HeapInuse/(1<<20), r.End.HeapInuse/(1<<20))
		p("| RSS (for information) | %.1f MiB | %.1f MiB |\n", mib(r.Warm.RSSKiB), mib(r.End.RSSKiB))
		p("| consumer / provider connections | %.0f / %.0f | %.0f / %.0f |\n\n", r.Warm.Downstream, r.Warm.Upstream, r.End.Downstream, r.End.Upstream)
	}
	p("Per-request outcomes, the provider's violations and the metrics every %v are in `bench/out/soak/soak.json`.\n%s\n", o.SampleEvery, soakEnd)
	return b.String()
}

func kibOrMiB(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// writeSoakSection replaces the soak section of the doc at path (or appends it).
func writeSoakSection(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(path, []byte(withSoakSection(string(old), section)), 0o644)
}

// withSoakSection returns doc with its soak section replaced by section (or inserted).
func withSoakSection(doc, section string) string {
	return spliceSection(doc, soakBegin, soakEnd, strings.TrimRight(section, "\n"))
}

// soakSectionOf returns the soak section of the doc at path ("" if none), for the benchmark
// report to keep when it rewrites the file.
func soakSectionOf(path string) string { return sectionOf(path, soakBegin, soakEnd) }

// sectionOf returns the text from begin to end (markers included) of the doc at path, "" if
// it has none.
func sectionOf(path, begin, end string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	i, j := bytes.Index(b, []byte(begin)), bytes.Index(b, []byte(end))
	if i < 0 || j < i {
		return ""
	}
	return string(b[i:j+len(end)]) + "\n"
}

// killWords says how the soak's provider kills end its connections.
func killWords(mode string) string {
	switch mode {
	case "close":
		return "each kill closes the connections as a dying process's kernel does (a RST if bytes are unread, else a FIN), so Stormgate can prove requests unread and send them again"
	case "alternate":
		return "kills alternate between SO_LINGER 0 resets (nothing provable: requests in flight are answered 35) and closes as a dying process's kernel does (Stormgate proves unread requests and sends them again; a request the provider sees twice is a violation)"
	}
	return "each kill resets the connections with SO_LINGER 0"
}

// quietAfter says how long a leak sample waited, with the load paused, for nothing to be in flight.
func quietAfter(sm *SoakSample) string {
	if !sm.Quiet {
		return fmt.Sprintf("still busy after %v", sm.QuietAfter.Round(100*time.Millisecond))
	}
	return sm.QuietAfter.Round(100 * time.Millisecond).String()
}
