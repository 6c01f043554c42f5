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
	// The Triple soak's (`suite soak --protocol triple`) section, apart from the Dubbo one's.
	soakTripleBegin = "<!-- soak-triple:begin -->"
	soakTripleEnd   = "<!-- soak-triple:end -->"
)

// markers are the doc markers of r's section: the Dubbo soak's or the Triple soak's.
func (r *SoakResult) markers() (begin, end string) {
	if r.Options.Protocol == protoTriple {
		return soakTripleBegin, soakTripleEnd
	}
	return soakBegin, soakEnd
}

// markdown is the soak's section, markers included (templates/soak.md.tmpl).
func (r *SoakResult) markdown() (string, error) {
	d := struct {
		*SoakResult
		Begin, End, Started, Verdict, Kill, BodyMax, Replies string
		E                                                    *SoakSample
		Wall                                                 time.Duration
		Triple                                               bool
	}{SoakResult: r, Wall: r.Wall.Round(time.Second), Triple: r.Options.Protocol == protoTriple, Started: r.Started.UTC().Format("2006-01-02 15:04"), Verdict: "**passed**",
		Kill: killWords(r.Options.Kill), BodyMax: kibOrMiB(r.Options.BodyMax), E: r.End}
	d.Begin, d.End = r.markers()
	if !r.Pass {
		d.Verdict = "**FAILED**"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.LocalReplies)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, r.LocalReplies[k]))
	}
	d.Replies = strings.Join(parts, ", ")
	var b strings.Builder
	err := reportTemplates.ExecuteTemplate(&b, "soak", d)
	return b.String(), err
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

// writeSoakSection replaces r's soak section (section) of the doc at path (or appends it).
func (r *SoakResult) writeSoakSection(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	begin, end := r.markers()
	return os.WriteFile(path, []byte(withSection(string(old), begin, end, section)), 0o644)
}

// withSoakSection returns doc with its (Dubbo) soak section replaced by section (or inserted).
func withSoakSection(doc, section string) string {
	return withSection(doc, soakBegin, soakEnd, section)
}

// withSection returns doc with the section between begin and end replaced by section (or inserted).
func withSection(doc, begin, end, section string) string {
	return spliceSection(doc, begin, end, strings.TrimRight(section, "\n"))
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
