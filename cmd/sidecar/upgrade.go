package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/handover"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// The running side of `sidecar upgrade` (issue 14; handover/doc.go has the mechanics). One
// upgrade at a time, in this order, each phase logged with its duration:
//
//	preflight  the new binary runs `run ... --preflight` (settings, logger, the settings in
//	           force on stdin, its state format); refused: nothing stopped, say why
//	freeze     admission first (the listening socket stays open: handshakes queue in the
//	           kernel), then the data plane at frame boundaries
//	state      settings in force with provenance, both snapshots, the metrics and admin
//	           listening sockets, the old executable's fd, the timing: into a memfd
//	exec       the new binary, same PID, same command line; failure: thaw, serve on
//	restore    (new image) the same in reverse; failure: roll back to the old binary
//	serving    the new image logs how long consumers waited, and /upgrade reports it
//
// The handover runs on run's main goroutine with the settings lock held, so that no xDS
// push or SIGHUP reload changes a stage in the middle; the preflight runs before, on the
// goroutine of the request (admin) or its own (SIGUSR2).

// Results, the label values of stormgate_upgrades_total.
const (
	resultSuccess    = "success"     // the new binary serves
	resultRefused    = "refused"     // the preflight (or a check) refused it: nothing was stopped
	resultFailed     = "failed"      // failed between freeze and exec: this process thawed and serves on
	resultRolledBack = "rolled_back" // the new binary could not restore: the old one restored and serves on
)

var upgradeResults = []string{resultSuccess, resultRefused, resultFailed, resultRolledBack}

// Sections of the handover state.
const (
	secSettings  = "settings"
	secAdmission = "admission"
	secProxy     = "proxy"
)

const (
	// defaultPreflightTimeout bounds the new binary's preflight ("a few seconds").
	defaultPreflightTimeout = 5 * time.Second
	// freezeTimeout bounds the data plane's freeze (its pollers parking).
	freezeTimeout = 5 * time.Second
)

// upgradeOutcome is one upgrade as /upgrade reports it.
type upgradeOutcome struct {
	ID      string            `json:"id"`
	Result  string            `json:"result"` // one of the results; "" while in progress
	Reason  string            `json:"reason,omitempty"`
	From    string            `json:"from"`
	To      string            `json:"to,omitempty"` // the version that runs now (success), or the refused binary's
	Binary  string            `json:"binary"`
	Trigger string            `json:"trigger"` // "admin" or "SIGUSR2"
	At      time.Time         `json:"at"`
	Phases  map[string]string `json:"phases,omitempty"`      // durations, "12.3ms"
	Handed  map[string]int    `json:"handed_over,omitempty"` // consumers, upstream, pending
}

// upgradeStatus is GET /upgrade.
type upgradeStatus struct {
	Version   string          `json:"version"`
	PID       int             `json:"pid"`
	Upgrading bool            `json:"upgrading"`
	Last      *upgradeOutcome `json:"last"`
}

// upgradeJob is an upgrade that passed its preflight, on its way to the main goroutine.
type upgradeJob struct {
	out        upgradeOutcome
	started    time.Time
	preflight  time.Duration
	compact    bool // the new binary reads the consumers as one compact blob
	endStreams bool // HTTP/2 calls still open after the quiesce are ended (upgrade --end-streams)
}

// plane is what a handover moves and what run serves with; run's main goroutine owns it.
type plane struct {
	ctx      context.Context
	log      *zap.Logger
	reg      prometheus.Registerer
	store    *settings.Store
	live     *liveSettings
	srv      *proxy.Server
	adm      *admission.Admitter
	admNow   atomic.Pointer[admission.Admitter] // adm, for the proxy's OnConnClosed (any goroutine)
	handler  admission.Handler
	lns      map[string]net.Listener
	serveErr chan error // of the current adm.Serve

	goroutines *sync.WaitGroup // run's (sidecar.goroutines)
}

// serve runs adm.Serve on one of run's goroutines; its result arrives on p.serveErr.
func (p *plane) serve() {
	ch := make(chan error, 1)
	p.serveErr = ch
	adm := p.adm
	p.goroutines.Go(func() { ch <- adm.Serve(p.ctx, p.handler) })
}

// upgrader runs upgrades of this process and keeps their record.
type upgrader struct {
	log           *zap.Logger
	args          []string // run's command line without the binary (os.Args[1:])
	defaultBinary string   // --upgrade-binary, else this process's executable
	settings      func() *sg.Settings
	draining      func() bool
	jobs          chan upgradeJob
	busy          atomic.Bool

	mu     sync.Mutex
	last   *upgradeOutcome
	counts map[string]uint64

	total     *prometheus.CounterVec
	durations *prometheus.GaugeVec
	handed    *prometheus.GaugeVec
}

func newUpgrader(log *zap.Logger, defaultBinary string, settings func() *sg.Settings, draining func() bool,
	reg prometheus.Registerer) (*upgrader, error) {
	u := &upgrader{log: log, args: slices.Clone(os.Args[1:]), defaultBinary: defaultBinary, settings: settings,
		draining: draining, jobs: make(chan upgradeJob, 1), counts: map[string]uint64{}}
	u.total = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stormgate_upgrades_total",
		Help: "Upgrades of Stormgate itself (sidecar upgrade, SIGUSR2) by result: success, refused (the new binary failed its preflight: nothing was stopped), failed (failed before exec: this process thawed), rolled_back (the new binary could not restore: the old one did). Carried across upgrades.",
	}, []string{"result"})
	u.durations = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stormgate_upgrade_duration_seconds",
		Help: "Phases of the last handover: preflight, freeze (admission and data plane), exec (until the new image runs), restore, total (what consumers waited: freeze to serving).",
	}, []string{"phase"})
	u.handed = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stormgate_upgrade_connections",
		Help: "What the last handover moved: consumer connections, upstream (provider) connections, pending (accepted, not yet admitted).",
	}, []string{"kind"})
	for _, r := range upgradeResults {
		u.total.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{u.total, u.durations, u.handed} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// record ends an upgrade: its outcome for /upgrade, the counter, one log line.
func (u *upgrader) record(o upgradeOutcome) {
	u.mu.Lock()
	u.last = &o
	u.counts[o.Result]++
	u.mu.Unlock()
	u.total.WithLabelValues(o.Result).Inc()
	fields := []zap.Field{zap.String("id", o.ID), zap.String("result", o.Result), zap.String("binary", o.Binary),
		zap.String("from", o.From), zap.String("to", o.To), zap.String("trigger", o.Trigger)}
	switch o.Result {
	case resultSuccess:
		u.log.Info("upgrade: done", fields...)
	default:
		u.log.Error("upgrade: "+o.Result+"; still serving with "+version, append(fields, zap.String("reason", o.Reason))...)
	}
}

// carry restores the counters of the previous images.
func (u *upgrader) carry(counts map[string]uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for r, n := range counts {
		u.counts[r] += n
		u.total.WithLabelValues(r).Add(float64(n))
	}
}

func (u *upgrader) status() upgradeStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	return upgradeStatus{Version: version, PID: os.Getpid(), Upgrading: u.busy.Load(), Last: u.last}
}

func newUpgradeID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errUpgradeBusy refuses a second upgrade while one runs.
var errUpgradeBusy = errors.New("an upgrade is already in progress")

// prepare checks the binary and runs its preflight. On success the caller owns the busy
// flag until the job has run; on refusal the outcome is recorded (except errUpgradeBusy).
func (u *upgrader) prepare(ctx context.Context, binary, trigger string, timeout time.Duration) (upgradeJob, error) {
	if !u.busy.CompareAndSwap(false, true) {
		return upgradeJob{}, errUpgradeBusy
	}
	job := upgradeJob{started: time.Now(),
		out: upgradeOutcome{ID: newUpgradeID(), From: version, Binary: binary, Trigger: trigger, At: time.Now().UTC()}}
	refuse := func(err error) (upgradeJob, error) {
		job.out.Result, job.out.Reason = resultRefused, err.Error()
		u.record(job.out)
		u.busy.Store(false)
		return job, err
	}
	if binary == "" {
		binary = u.defaultBinary
		job.out.Binary = binary
	}
	switch {
	case binary == "":
		return refuse(errors.New("no binary: pass --binary, or start run with --upgrade-binary"))
	case !filepath.IsAbs(binary):
		return refuse(fmt.Errorf("binary %q: the path must be absolute (the sidecar resolves it in its own file system)", binary))
	case u.draining():
		return refuse(errors.New("the sidecar is draining"))
	}
	u.log.Info("upgrade: preflight", zap.String("id", job.out.ID), zap.String("binary", binary), zap.String("trigger", trigger))
	inForce, err := proto.MarshalOptions{Deterministic: true}.Marshal(u.settings())
	if err != nil {
		return refuse(err)
	}
	rep, err := handover.Preflight(ctx, binary, append(slices.Clone(u.args), handover.PreflightFlag), inForce, timeout)
	job.preflight = time.Since(job.started)
	job.out.To = rep.Version
	if err != nil {
		return refuse(fmt.Errorf("preflight: %w", err))
	}
	if p := u.settings().GetUpstream().GetProtocol(); p != "" && p != "dubbo" && !rep.Can(handover.CarriesHTTP2) {
		// Its restore would take the HTTP/2 consumers for Dubbo ones and close them.
		return refuse(fmt.Errorf("preflight: %s (version %s) cannot take HTTP/2 consumer connections over "+
			"(upstream.protocol is %s): upgrade to a version that can, or restart", binary, rep.Version, p))
	}
	job.compact = rep.Can(handover.CarriesCompactConsumers)
	u.log.Info("upgrade: preflight passed", zap.String("id", job.out.ID), zap.String("binary", binary),
		zap.String("version", rep.Version), zap.Duration("took", job.preflight))
	return job, nil
}

// fromSignal starts an upgrade to --upgrade-binary on SIGUSR2: the preflight on a goroutine
// of g (it ends with ctx), the handover on the main one.
func (u *upgrader) fromSignal(ctx context.Context, g *sync.WaitGroup) {
	g.Go(func() {
		job, err := u.prepare(ctx, "", "SIGUSR2", defaultPreflightTimeout)
		if errors.Is(err, errUpgradeBusy) {
			u.log.Warn("SIGUSR2 ignored: " + err.Error())
			return
		}
		if err == nil {
			u.jobs <- job
		}
	})
}

// handler serves /upgrade on the admin listener: GET reports, POST starts an upgrade
// (binary=PATH, preflight_timeout=5s, end_streams=true) and answers once its preflight has passed (202, the
// handover follows at once) or failed (422, with why); `sidecar upgrade` then polls GET
// for the outcome, across the exec.
func (u *upgrader) handler(ctx context.Context) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		reply := func(code int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			b, _ := json.MarshalIndent(v, "", "  ")
			_, _ = w.Write(append(b, '\n'))
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			reply(http.StatusOK, u.status())
			return
		case http.MethodPost:
		default:
			w.Header().Set("Allow", "GET, HEAD, POST")
			http.Error(w, "GET /upgrade reports; POST /upgrade?binary=/path/to/sidecar upgrades", http.StatusMethodNotAllowed)
			return
		}
		timeout := defaultPreflightTimeout
		if v := r.FormValue("preflight_timeout"); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 || d > time.Minute {
				reply(http.StatusBadRequest, map[string]string{"error": "preflight_timeout: a duration up to 1m, e.g. 5s"})
				return
			}
			timeout = d
		}
		endStreams := false
		if v := r.FormValue("end_streams"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				reply(http.StatusBadRequest, map[string]string{"error": "end_streams: true or false"})
				return
			}
			endStreams = b
		}
		job, err := u.prepare(ctx, r.FormValue("binary"), "admin", timeout)
		job.endStreams = endStreams
		switch {
		case errors.Is(err, errUpgradeBusy):
			reply(http.StatusConflict, map[string]string{"error": err.Error()})
			return
		case err != nil:
			reply(http.StatusUnprocessableEntity, map[string]any{"error": err.Error(), "outcome": job.out})
			return
		}
		reply(http.StatusAccepted, job.out)
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush() // on the wire before the exec closes this connection
		}
		u.jobs <- job
	}
}

// errThawFailed means a failed handover could not resume serving here either.
var errThawFailed = errors.New("upgrade: could not resume after a failed handover")

// handover moves p to job's binary: freeze, state, exec. It returns only when the exec did
// not happen; p then serves again (thawed), unless the error wraps errThawFailed. A stop
// signal pending on stop right before the exec abandons the upgrade (the new image would
// never see it) and is handed back in *got.
func (u *upgrader) handover(p *plane, job upgradeJob, stop <-chan os.Signal, got *os.Signal) error {
	defer u.busy.Store(false)
	fail := func(result string, err error) error {
		job.out.Result, job.out.Reason = result, err.Error()
		u.record(job.out)
		return err
	}
	p.live.mu.Lock()
	defer p.live.mu.Unlock()
	if !p.srv.Ready() {
		return fail(resultRefused, errors.New("the sidecar started draining"))
	}
	t0 := time.Now()
	// No garbage collection from the freeze to the exec: a collection of this image's heap
	// (every consumer's books) started in between would take a core from the freeze and the
	// state, which consumers wait through. Back on when the exec did not happen.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	admSnap, err := p.adm.Freeze()
	if err != nil {
		return fail(resultFailed, fmt.Errorf("freezing the listener: %w", err))
	}
	fctx, cancel := context.WithTimeout(p.ctx, freezeTimeout)
	psn, err := p.srv.FreezeWith(fctx, proxy.FreezeOptions{EndOpenCalls: job.endStreams})
	cancel()
	if err != nil {
		if terr := u.thaw(p, admSnap, nil); terr != nil {
			return fail(resultFailed, fmt.Errorf("%w: %v (after freezing the data plane failed: %v)", errThawFailed, terr, err))
		}
		return fail(resultFailed, fmt.Errorf("freezing the data plane: %w", err))
	}
	frozen := time.Since(t0)
	stats := map[string]int{"consumers": len(psn.Sessions), "pending": len(admSnap.Pending)}
	for _, pl := range psn.Pools {
		stats["upstream"] += len(pl.Conns)
	}
	u.log.Info("upgrade: frozen", zap.String("id", job.out.ID), zap.Duration("took", frozen),
		zap.Int("consumers", stats["consumers"]), zap.Int("upstream", stats["upstream"]), zap.Int("pending", stats["pending"]))

	st, keep, closeFDs, err := u.state(p, job, admSnap, psn, t0, frozen, stats)
	if err == nil {
		if faultInjection == "slow" {
			time.Sleep(500 * time.Millisecond) // test builds only: a window to aim signals at
		}
		select {
		case *got = <-stop:
			err = fmt.Errorf("%s arrived during the handover", *got)
		default:
		}
	}
	if err == nil {
		u.log.Info("upgrade: exec", zap.String("id", job.out.ID), zap.String("binary", job.out.Binary),
			zap.Duration("since_freeze", time.Since(t0)), zap.Int("descriptors", len(keep)))
		_ = u.log.Sync()
		argv := append([]string{job.out.Binary}, u.args...)
		err = handover.Exec(job.out.Binary, argv, handover.Env(handover.StateEnv(st.memfd, st.oldExe)), keep)
		// Only when execve failed.
	}
	closeFDs()
	if terr := u.thaw(p, admSnap, psn); terr != nil {
		return fail(resultFailed, fmt.Errorf("%w: %v (after: %v)", errThawFailed, terr, err))
	}
	return fail(resultFailed, err)
}

// stateFDs are the descriptors a handover opens besides the stages'.
type stateFDs struct{ memfd, oldExe int }

// state writes the handover state to a memfd and returns every descriptor to keep open
// across the exec, and a function that closes what it opened (when the exec fails).
func (u *upgrader) state(p *plane, job upgradeJob, admSnap *admission.Snapshot, psn *proxy.Snapshot,
	t0 time.Time, frozen time.Duration, stats map[string]int) (stateFDs, []int, func(), error) {
	fds := stateFDs{memfd: -1, oldExe: -1}
	var opened []int
	closeAll := func() {
		for _, fd := range opened {
			_ = closeFD(fd)
		}
	}
	fail := func(err error) (stateFDs, []int, func(), error) { return fds, nil, closeAll, err }

	settingsB, err := encodeSettingsState(p.store)
	if err != nil {
		return fail(err)
	}
	admB, err := admSnap.MarshalBinary()
	if err != nil {
		return fail(err)
	}
	psn.SetCompact(job.compact)
	proxyB, err := psn.MarshalBinary()
	if err != nil {
		return fail(err)
	}
	listeners := map[string]int{}
	for name, ln := range p.lns {
		fd, err := dupListener(ln)
		if err != nil {
			return fail(fmt.Errorf("the %s listener: %w", name, err))
		}
		opened = append(opened, fd)
		listeners[name] = fd
	}
	if fds.oldExe, err = handover.OpenSelf(); err != nil {
		return fail(err)
	}
	opened = append(opened, fds.oldExe)
	u.mu.Lock()
	counts := map[string]uint64{}
	for r, n := range u.counts {
		counts[r] = n
	}
	u.mu.Unlock()
	h := handover.Header{ID: job.out.ID, From: version, Binary: job.out.Binary, Trigger: job.out.Trigger, Args: slices.Clone(os.Args),
		Listeners: listeners, FDs: append(admSnap.FDs(), psn.FDs()...), Started: t0.Round(0),
		Phases: map[string]time.Duration{"preflight": job.preflight, "freeze": frozen, "state": time.Since(t0) - frozen},
		Counts: counts, Stats: stats}
	h.ExecAt = time.Now().Round(0)
	st := &handover.State{Header: h, Sections: map[string][]byte{secSettings: settingsB, secAdmission: admB, secProxy: proxyB}}
	if fds.memfd, err = handover.WriteMemfd(st); err != nil {
		return fail(err)
	}
	opened = append(opened, fds.memfd)
	keep := append(slices.Clone(h.FDs), fds.memfd, fds.oldExe)
	for _, fd := range listeners {
		keep = append(keep, fd)
	}
	return fds, keep, closeAll, nil
}

// thaw resumes serving in this process after a handover that did not exec: the data plane
// where it stopped (psn nil: its freeze failed and it thawed itself), admission from its
// snapshot. Called with p.live.mu held.
func (u *upgrader) thaw(p *plane, admSnap *admission.Snapshot, psn *proxy.Snapshot) error {
	// Admission first: the data plane reports closes to it once thawed.
	adm, err := admission.Restore(admSnap, settings.AdmissionConfig(p.store.Settings()), p.log.Named("admission"), p.reg)
	if err != nil {
		if psn != nil {
			p.srv.Thaw() // serve the consumers there are, at least
		}
		return err
	}
	p.adm = adm
	p.admNow.Store(adm)
	p.live.adm = adm
	if psn != nil {
		handover.CloseOnExec(psn.FDs()...)
		p.srv.Thaw()
	}
	p.serve()
	u.log.Info("upgrade: thawed; serving on in this process")
	return nil
}

// dupListener returns a descriptor of ln's socket without FD_CLOEXEC (dup(2)); the
// listener goes on serving until the exec.
func dupListener(ln net.Listener) (int, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return -1, fmt.Errorf("not a TCP listener: %T", ln)
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, derr = unix.Dup(int(s)) }); err != nil {
		return -1, err
	}
	return fd, derr
}

func closeFD(fd int) error { return unix.Close(fd) }
