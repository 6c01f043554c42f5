package admission_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stormgate/stormgate/admission/storm"
	"github.com/stormgate/stormgate/internal/racebuild"
	"github.com/stormgate/stormgate/settings"
)

func TestMain(m *testing.M) {
	storm.ChildMain() // in a storm child process: runs its role and exits
	os.Exit(m.Run())
}

func runStorm(t testing.TB, opt storm.Options) storm.Report {
	t.Helper()
	rep, err := storm.Run(context.Background(), opt)
	if errors.Is(err, storm.ErrNeedsRoot) {
		t.Skip("skipping: the storm creates a network namespace, which needs root and iproute2 (run `make test` as root)")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	return rep
}

// TestAcceptanceStorm is issue 4, acceptance 1: in a namespace with net.core.somaxconn = 4096,
// two client processes open 10,000 connections as fast as they can against the Admitter.
func TestAcceptanceStorm(t *testing.T) {
	if racebuild.Enabled {
		t.Skip("skipping the storm acceptance under -race: its figures (overflows, p99 connect, rate) are timing; make timing runs it without -race")
	}
	const rate, burst = 2500, 500
	cfg := settings.AdmissionConfig(settings.Defaults())
	// A rate well below the clients' arrival rate, so that the queue stays backlogged and
	// every admission is token-paced (10,000 conns take ~3.8 s at 2,500/s, inside MaxWait):
	// the pacing itself is what is checked.
	cfg.AcceptRate, cfg.AcceptBurst, cfg.MaxWait = rate, burst, 10*time.Second
	cfg.MaxConnections = 10500 // the server child holds 10,000 of its 20,000 fds
	rep := runStorm(t, storm.Options{Connections: 10000, Clients: 2, Somaxconn: 4096, Admission: &cfg})

	if rep.Kernel.ListenOverflows != 0 || rep.Kernel.ListenDrops != 0 {
		t.Errorf("ListenOverflows %d, ListenDrops %d; want 0, 0", rep.Kernel.ListenOverflows, rep.Kernel.ListenDrops)
	}
	if rep.Succeeded != rep.Connections || len(rep.Errors) != 0 {
		t.Errorf("%d of %d connections succeeded; errors %v", rep.Succeeded, rep.Connections, rep.Errors)
	}
	if rep.Connect.P99 >= 100*time.Millisecond {
		t.Errorf("p99 connect %v, want < 100ms", rep.Connect.P99)
	}
	if rep.Kernel.SynRetrans != 0 {
		t.Errorf("%d SYN retransmissions, want 0", rep.Kernel.SynRetrans)
	}
	// Admission proceeds at the configured rate: token-paced after the burst, none forced by
	// MaxWait, and the pending queue held the rest meanwhile.
	if rep.Admitted != rep.Connections {
		t.Errorf("admitted %d of %d", rep.Admitted, rep.Connections)
	}
	// Faster than the rate would be a pacing bug; slower happens when the machine stalls the
	// server for longer than burst/rate (200 ms), which loses tokens (seen under -race).
	if rep.PacedRate < rate*0.75 || rep.PacedRate > rate*1.02 {
		t.Errorf("paced admission rate %.0f/s, want %d/s (-25%%, +2%%)", rep.PacedRate, rate)
	}
	if rep.MaxAheadOfRate > burst+1 {
		t.Errorf("a window admitted %.0f beyond rate·window; the bucket allows %d", rep.MaxAheadOfRate, burst)
	}
	if rep.ForcedByMaxWait != 0 {
		t.Errorf("%d admissions forced by MaxWait", rep.ForcedByMaxWait)
	}
	// The clients open connections several times faster than 2,500/s, so the pending gauge
	// must climb into the thousands (unpaced, it stays within an accept batch).
	if rep.MaxPending < rep.Connections/10 {
		t.Errorf("pending peaked at %d: connections were not held for tokens", rep.MaxPending)
	}
	if want := time.Duration(float64(rep.Connections-burst) / rate * float64(time.Second)); rep.AdmissionSpan < want*9/10 {
		t.Errorf("admissions spanned %v, pacing at %d/s needs about %v", rep.AdmissionSpan, rate, want)
	}
}

// BenchmarkAcceptStorm runs one 10,000-connection storm per target and reports the kernel
// counters and latencies as metrics (one iteration is one storm; use -benchtime 1x).
// Against the baseline (a listener like the incident's provider: backlog 50, slow
// accept) it is issue 4's acceptance 2, a documented measurement and not a pass/fail
// test of the baseline: `make bench` shows the same storm (bench/suite, "storm").
func BenchmarkAcceptStorm(b *testing.B) {
	for _, target := range []storm.Target{storm.Stormgate, storm.Baseline} {
		b.Run(string(target), func(b *testing.B) {
			var rep storm.Report
			for b.Loop() {
				rep = runStorm(b, storm.Options{Target: target, ConnectTimeout: 5 * time.Second, FirstByteWait: 5 * time.Second})
			}
			b.ReportMetric(float64(rep.Kernel.ListenOverflows), "overflows")
			b.ReportMetric(float64(rep.Kernel.ListenDrops), "drops")
			b.ReportMetric(float64(rep.Kernel.SynRetrans), "syn-retrans")
			b.ReportMetric(float64(rep.Connections-rep.Succeeded), "failed")
			b.ReportMetric(float64(rep.Connect.P99.Microseconds())/1000, "connect-p99-ms")
			b.ReportMetric(float64(rep.FirstByte.P99.Microseconds())/1000, "first-byte-p99-ms")
		})
	}
}

// TestMeasureAdmissionRates is the measurement behind the default AcceptRate/AcceptBurst:
// storms of 10,000 connections against a netpoll echo server, with 50 already-admitted
// connections sending 5,000 requests/s, at several rates. It logs, per rate, how long the
// storm took to be admitted and answered, and the steady connections' latency before and
// during it. Opt-in: STORMGATE_MEASURE=1 (it takes a few minutes).
func TestMeasureAdmissionRates(t *testing.T) {
	if os.Getenv("STORMGATE_MEASURE") == "" {
		t.Skip("set STORMGATE_MEASURE=1 to run the admission-rate measurement")
	}
	type setting struct {
		rate  float64
		burst int
	}
	for _, s := range []setting{{0, 1}, {20000, 2000}, {10000, 1000}, {5000, 500}, {2000, 500}} {
		cfg := settings.AdmissionConfig(settings.Defaults())
		cfg.AcceptRate, cfg.AcceptBurst = s.rate, s.burst
		cfg.MaxConnections = 10500
		rep := runStorm(t, storm.Options{Connections: 10000, Clients: 2, Admission: &cfg, Echo: true, Steady: 50})
		t.Logf("rate %.0f burst %d: storm answered p50 %v p99 %v; admission span %v, forced %d; steady p99 quiet %v storm %v max %v",
			s.rate, s.burst, rep.FirstByte.P50, rep.FirstByte.P99, rep.AdmissionSpan, rep.ForcedByMaxWait,
			rep.SteadyQuiet.P99, rep.SteadyStorm.P99, rep.SteadyStorm.Max)
	}
}
