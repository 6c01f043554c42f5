package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/peer"
)

func TestSoakEndSampleSamePhaseAsWarmup(t *testing.T) {
	for _, tc := range []struct {
		o    SoakOptions
		want time.Duration
	}{
		{SoakOptions{Duration: 10 * time.Minute, Warmup: 90 * time.Second, RestartEvery: time.Minute}, 570 * time.Second},
		{SoakOptions{Duration: time.Minute, Warmup: 25 * time.Second, RestartEvery: 20 * time.Second}, 45 * time.Second},
		// No whole cycle fits: as late as possible.
		{SoakOptions{Duration: time.Minute, Warmup: 30 * time.Second, RestartEvery: time.Minute}, 55 * time.Second},
	} {
		if got := soakEndSample(tc.o); got != tc.want {
			t.Errorf("%+v: end sample at %v, want %v", tc.o, got, tc.want)
		}
	}
}

func TestSoakSectionIsKept(t *testing.T) {
	sec := soakBegin + "\n## Soak\nfigures\n" + soakEnd + "\n"
	doc := withSoakSection("# Benchmarks\n\ntables\n", sec)
	if !strings.HasSuffix(doc, sec) || !strings.HasPrefix(doc, "# Benchmarks\n\ntables\n\n") {
		t.Fatalf("appended:\n%s", doc)
	}
	newer := strings.Replace(sec, "figures", "new figures", 1)
	doc2 := withSoakSection(doc+"\n## After\n", newer)
	if strings.Count(doc2, soakBegin) != 1 || !strings.Contains(doc2, "new figures") || strings.Contains(doc2, "\nfigures") ||
		!strings.HasSuffix(doc2, soakEnd+"\n\n## After\n") {
		t.Fatalf("replaced:\n%s", doc2)
	}
	// The benchmark report regenerates the rest of the file and keeps the section.
	path := t.TempDir() + "/benchmarks.md"
	if err := (&SoakResult{}).writeSoakSection(path, sec); err != nil {
		t.Fatal(err)
	}
	if got := soakSectionOf(path); got != sec {
		t.Fatalf("section read back as %q", got)
	}
	// The Triple soak writes its own section beside it and leaves the Dubbo one as it was.
	triple := &SoakResult{Options: SoakOptions{Protocol: protoTriple}}
	tsec := soakTripleBegin + "\n## Soak with Triple consumers\nh2 figures\n" + soakTripleEnd + "\n"
	if err := triple.writeSoakSection(path, tsec); err != nil {
		t.Fatal(err)
	}
	if got := soakSectionOf(path); got != sec {
		t.Fatalf("the Triple soak changed the Dubbo section: %q", got)
	}
	if got := sectionOf(path, soakTripleBegin, soakTripleEnd); got != tsec {
		t.Fatalf("Triple section read back as %q", got)
	}
	if !slices.Contains(keptSections, [2]string{soakTripleBegin, soakTripleEnd}) {
		t.Fatal("make bench would drop the Triple soak's section")
	}
}

func TestSoakEvaluate(t *testing.T) {
	good := func() *SoakResult {
		return &SoakResult{
			Options:  SoakOptions{Duration: 10 * time.Minute, RestartEvery: time.Minute, Tolerance: 0.05},
			Restarts: 9,
			Load: &loadgen.Result{Config: loadgen.Config{Conns: 10}, ConnsOpened: 10, ConnsOpenAtEnd: 10,
				Sent: 100, OK: 97, Errors: 3, ErrorByStatus: map[int]uint64{35: 3}, HeartbeatsSent: 5, HeartbeatsAnswered: 5},
			Provider: &peer.EchoStats{Requests: 97, ConnsAccepted: 40, Restarts: 9},
			Warm:     &SoakSample{OpenFDs: 1000, Goroutines: 40, HeapLive: 100 << 20, HeapInuse: 100 << 20},
			End:      &SoakSample{OpenFDs: 1010, Goroutines: 41, HeapLive: 104 << 20, HeapInuse: 150 << 20},
		}
	}
	r := good()
	r.evaluate()
	if !r.Pass {
		t.Fatalf("a clean run failed: %s", r.summary())
	}
	for name, spoil := range map[string]func(*SoakResult){
		"foreign body":       func(r *SoakResult) { r.Load.OK--; r.Load.BodyMismatches, r.Load.ForeignBodies = 1, 1 },
		"timeout":            func(r *SoakResult) { r.Load.OK--; r.Load.Timeouts = 1 },
		"second answer":      func(r *SoakResult) { r.Load.Duplicates = 1 },
		"provider violation": func(r *SoakResult) { r.Provider.Violations = 1 },
		"extra connections":  func(r *SoakResult) { r.Provider.ConnsAccepted = 41 },
		"cut mid-frame":      func(r *SoakResult) { r.Provider.Truncated = 1 },
		"consumer reset":     func(r *SoakResult) { r.Load.Resets, r.Load.ConnsOpenAtEnd = 1, 9 },
		"heap grew":          func(r *SoakResult) { r.End.HeapLive = 106 << 20 },
		"fds leaked":         func(r *SoakResult) { r.End.OpenFDs = 1060 },
		"missed restarts":    func(r *SoakResult) { r.Restarts = 8 },
		"no end sample":      func(r *SoakResult) { r.End = nil },
		"run error":          func(r *SoakResult) { r.Error = "sidecar exited" },
	} {
		r := good()
		spoil(r)
		r.evaluate()
		if r.Pass {
			t.Errorf("%s: passed", name)
		}
	}
}

func TestLabelValue(t *testing.T) {
	if got := labelValue(`stormgate_local_replies_total{reason="upstream_lost"}`, "reason"); got != "upstream_lost" {
		t.Fatalf("got %q", got)
	}
}

// make bench rewrites docs/benchmarks.md and keeps what other runs wrote: the soak's section
// and the upgrade's (issue 14).
func TestKeptSections(t *testing.T) {
	soak := soakBegin + "\n## Soak\nsoak figures\n" + soakEnd
	up := upgradeBegin + "\n## Upgrade\nupgrade figures\n" + upgradeEnd
	path := t.TempDir() + "/benchmarks.md"
	if err := os.WriteFile(path, []byte("# old\n\n"+soak+"\n\n"+up+"\n\n## Load tool overhead\nold\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := keepSections("# Benchmarks\n\nnew tables\n\n## Load tool overhead\nnew\n", path)
	if !strings.Contains(doc, soak) || !strings.Contains(doc, up) || !strings.Contains(doc, "new tables") || strings.Contains(doc, "# old") {
		t.Fatalf("kept:\n%s", doc)
	}
	if i, j := strings.Index(doc, up), strings.Index(doc, "## Load tool overhead"); i < 0 || i > j {
		t.Fatalf("the upgrade section is not before the load tool's:\n%s", doc)
	}
}

// The Triple soak's section has its own markers and says what ran: the Triple echo provider, the
// sidecar with upstream.protocol triple, h2c consumers.
func TestSoakTripleMarkdown(t *testing.T) {
	r := &SoakResult{Options: SoakOptions{Protocol: protoTriple, Duration: time.Minute, RestartEvery: 20 * time.Second, Kill: "alternate",
		Conns: 100, Workers: 1, Rate: 100, BodyMin: 1, BodyMax: 1 << 10}, Command: "make soak", Pass: true,
		Load: &loadgen.Result{}, ProviderH2: &peer.TripleStats{}}
	sec, err := r.markdown()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{soakTripleBegin, soakTripleEnd, "## Soak with Triple consumers", "echo-provider --protocol triple",
		"`upstream.protocol triple`", "stormbench load --protocol triple"} {
		if !strings.Contains(sec, want) {
			t.Errorf("the Triple soak's section lacks %q:\n%s", want, sec)
		}
	}
	if strings.Contains(sec, soakBegin) || strings.Contains(sec, "one-way") {
		t.Errorf("the Triple soak's section has the Dubbo one's marker or words:\n%s", sec)
	}
}
