package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/handover"
	"github.com/stormgate/stormgate/inject/appprobe"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
)

// The new image's side of an upgrade (see upgrade.go), and the preflight.

// settingsState is the settings section of a handover: the settings in force with their
// version and source, and the base (defaults < file < flags) xDS pushes merge over, with
// each field's source; the last rejection. Settings are protobuf (unknown fields of a newer
// schema are ignored by an older binary: a downgrade drops what it does not know).
type settingsState struct {
	Base        []byte                `json:"base"`
	BaseSource  string                `json:"base_source"`
	BaseSources settings.FieldSources `json:"base_sources"`
	File        string                `json:"file,omitempty"`
	Active      []byte                `json:"active"`
	Version     string                `json:"version"`
	Source      string                `json:"source"`
	Rejected    *settings.Rejection   `json:"last_rejected,omitempty"`
	Rejecting   bool                  `json:"rejecting,omitempty"`
}

func encodeSettingsState(st *settings.Store) ([]byte, error) {
	base, a := st.Base(), st.Load()
	m := proto.MarshalOptions{Deterministic: true}
	bb, err := m.Marshal(base.Settings)
	if err != nil {
		return nil, err
	}
	ab, err := m.Marshal(a.Settings)
	if err != nil {
		return nil, err
	}
	return json.Marshal(settingsState{Base: bb, BaseSource: base.Source, BaseSources: base.Sources, File: base.File,
		Active: ab, Version: a.Version, Source: a.Source, Rejected: st.LastRejected(), Rejecting: st.Rejecting()})
}

// faultInjection is empty in every release build. The e2e tests build binaries with
// -ldflags "-X main.faultInjection=...": "restore" passes its preflight and then refuses
// every handed-over state (to prove the rollback); "slow" waits 500 ms before its exec and
// in its restore (to aim signals at a handover).
var faultInjection string

// restoredSettings decodes the settings section: the base and the settings in force, both
// completed with this binary's defaults (fields it has and the old one had not) and valid
// here.
func restoredSettings(b []byte) (settingsState, settings.Layered, *sg.Settings, error) {
	var ss settingsState
	if err := json.Unmarshal(b, &ss); err != nil {
		return ss, settings.Layered{}, nil, fmt.Errorf("settings section: %w", err)
	}
	base, active := &sg.Settings{}, &sg.Settings{}
	if err := proto.Unmarshal(ss.Base, base); err != nil {
		return ss, settings.Layered{}, nil, fmt.Errorf("settings section: base: %w", err)
	}
	if err := proto.Unmarshal(ss.Active, active); err != nil {
		return ss, settings.Layered{}, nil, fmt.Errorf("settings section: settings in force: %w", err)
	}
	l := settings.Layered{Settings: settings.WithDefaults(base), Source: ss.BaseSource, Sources: settings.FieldSources{}, File: ss.File}
	for _, f := range settings.Fields() {
		l.Sources[f.Path] = settings.SourceDefaults // fields this binary adds
	}
	for k, v := range ss.BaseSources {
		l.Sources[k] = v
	}
	active = settings.WithDefaults(active)
	if err := settings.Validate(active); err != nil {
		return ss, l, nil, problemsError{"the settings in force are invalid for this binary", err}
	}
	return ss, l, active, nil
}

// restoredStore is the old image's store again: same base, same settings in force with
// their version and source, same last rejection.
func restoredStore(ss settingsState, base settings.Layered, active *sg.Settings, reg prometheus.Registerer) (*settings.Store, error) {
	if settings.Equal(base.Settings, active) && ss.Source == base.Source {
		st, err := settings.NewLayeredStore(base, ss.Version, reg)
		if err != nil {
			return nil, err
		}
		restoreRejection(st, ss)
		return st, nil
	}
	st, err := settings.NewLayeredStore(base, settings.Version(base.Settings), reg)
	if err != nil {
		return nil, err
	}
	if err := st.Update(active, ss.Version, ss.Source, nil); err != nil {
		return nil, err
	}
	restoreRejection(st, ss)
	return st, nil
}

func restoreRejection(st *settings.Store, ss settingsState) {
	if r := ss.Rejected; r != nil {
		st.Reject(r.Version, r.Source, errors.New(r.Error))
		if !ss.Rejecting {
			st.Accepted()
		}
	}
}

// inheritedListeners wraps the metrics and admin listening sockets of the old image. The
// handed-over descriptors stay open (files) until the restore is done: a rollback hands
// them to the old binary again.
func inheritedListeners(fds map[string]int) (map[string]net.Listener, []*os.File, error) {
	lns := map[string]net.Listener{}
	var files []*os.File
	for name, fd := range fds {
		f := os.NewFile(uintptr(fd), "stormgate-"+name)
		files = append(files, f)
		ln, err := net.FileListener(f) // a dup of its own, in Go's poller
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, files, fmt.Errorf("the %s listener (fd %d): %w", name, fd, err)
		}
		lns[name] = ln
	}
	return lns, files, nil
}

// restoring is a handover this image is receiving: the origin of a restored plane.
type restoring struct {
	in            *handover.Incoming
	start         time.Time     // this image's start, wall clock
	ss            settingsState // the settings section
	listenerFiles []*os.File    // the handed-over HTTP listeners' descriptors, kept for a rollback
}

func (r *restoring) upgraded() bool { return true }

func (r *restoring) settings(*cobra.Command, runFlags) (settings.Layered, *sg.Settings, error) {
	ss, base, active, err := restoredSettings(r.in.State.Sections[secSettings])
	r.ss = ss
	if err == nil && faultInjection == "slow" {
		time.Sleep(500 * time.Millisecond) // test builds only: a window to aim signals at
	}
	return base, active, err
}

func (r *restoring) store(base settings.Layered, active *sg.Settings, reg prometheus.Registerer) (*settings.Store, error) {
	return restoredStore(r.ss, base, active, reg)
}

// listeners are the old image's, and any that f turns on and it had not.
func (r *restoring) listeners(f runFlags) (map[string]net.Listener, error) {
	lns, files, err := inheritedListeners(r.in.State.Header.Listeners)
	r.listenerFiles = files
	if err != nil {
		return nil, err
	}
	return bindHTTP(lns, f)
}

func (r *restoring) admitter(cfg admission.Config, log *zap.Logger, reg prometheus.Registerer) (*admission.Admitter, error) {
	var sn admission.Snapshot
	if err := sn.UnmarshalBinary(r.in.State.Sections[secAdmission]); err != nil {
		return nil, err
	}
	return admission.Restore(&sn, cfg, log, reg)
}

// proxy restores the data plane. On failure the listening socket goes back to the old
// binary: fail does not close it.
func (r *restoring) proxy(cfg proxy.Config, opts proxy.Options) (*proxy.Server, error) {
	if faultInjection == "restore" && r.in.Rollback == "" {
		// As late as a rollback is still safe: listeners and admission restored.
		return nil, errors.New("fault injected by a test build: this binary refuses every handed-over state")
	}
	var psn proxy.Snapshot
	if err := psn.UnmarshalBinary(r.in.State.Sections[secProxy]); err != nil {
		return nil, err
	}
	return proxy.Restore(&psn, cfg, opts)
}

// serving: the restored sockets are this image's (a later preflight must not inherit them),
// and there is nothing to roll back to any more.
func (r *restoring) serving(u *upgrader, log *zap.Logger) {
	handover.CloseOnExec(r.in.State.Header.FDs...)
	r.done(u, log)
}

// fail gives up on the restore: the new binary rolls back to the old one (which restores
// the same state), the old one (already rolled back to) cannot, and exits with the error.
// Nothing of the state may have been used yet.
func (r *restoring) fail(log *zap.Logger, err error) error {
	if log == nil { // before the settings gave one: JSON on stderr, as by default
		if log, _, _ = newLogger("info", "json"); log == nil {
			log = zap.NewNop()
		}
	}
	logErr := log.Error
	if r.in.Rollback != "" {
		logErr("upgrade: the old binary could not restore the handed-over state either; exiting",
			zap.Error(err), zap.String("new_binary_said", r.in.Rollback))
		return fmt.Errorf("restoring after a rollback (the new binary said: %s): %w", r.in.Rollback, err)
	}
	logErr("upgrade: the new binary cannot restore the handed-over state; rolling back to the old binary", zap.Error(err))
	_ = log.Sync()
	rerr := r.in.RollBack(version + ": " + err.Error())
	runtime.KeepAlive(r.listenerFiles) // their finalizers must not close the descriptors before the exec
	return fmt.Errorf("restore failed (%w), and so did the rollback: %v", err, rerr)
}

// outcome is the upgrade this image ends: success (the new binary serves) or a rollback
// (the old one serves again), with the phase durations.
func (r *restoring) outcome(serving time.Time) upgradeOutcome {
	h := r.in.State.Header
	o := upgradeOutcome{ID: h.ID, From: h.From, To: version, Binary: h.Binary, Result: resultSuccess,
		Trigger: h.Trigger, At: serving.UTC(), Handed: h.Stats, Phases: map[string]string{}}
	if r.in.Rollback != "" {
		o.Result, o.Reason, o.To = resultRolledBack, r.in.Rollback, ""
	}
	for _, p := range []string{"preflight", "freeze", "state"} {
		o.Phases[p] = h.Phases[p].String()
	}
	o.Phases["exec"] = r.execTook().String()
	o.Phases["restore"] = serving.Sub(r.start).String()
	o.Phases["total"] = serving.Sub(h.Started).String()
	return o
}

// execTook is from the old image's execve to this image's start (wall clock).
func (r *restoring) execTook() time.Duration {
	at := r.in.State.Header.ExecAt
	if at.IsZero() {
		return 0
	}
	return r.start.Sub(at)
}

// done records the handover in the upgrader and the metrics, logs that this image serves,
// and drops what a rollback would have needed.
func (r *restoring) done(u *upgrader, log *zap.Logger) {
	serving := time.Now()
	h := r.in.State.Header
	r.in.Done()
	for _, f := range r.listenerFiles {
		f.Close() // the listeners run on dups of their own
	}
	r.listenerFiles = nil
	u.carry(h.Counts)
	o := r.outcome(serving)
	for p, d := range map[string]time.Duration{"preflight": h.Phases["preflight"], "freeze": h.Phases["freeze"],
		"exec": r.execTook(), "restore": serving.Sub(r.start), "total": serving.Sub(h.Started)} {
		u.durations.WithLabelValues(p).Set(d.Seconds())
	}
	for k, n := range h.Stats {
		u.handed.WithLabelValues(k).Set(float64(n))
	}
	log.Info("upgrade: serving", zap.String("id", h.ID), zap.String("from", h.From), zap.String("version", version),
		zap.Bool("rolled_back", r.in.Rollback != ""), zap.Duration("restore", serving.Sub(r.start)),
		zap.Duration("exec", r.execTook()), zap.Duration("total", serving.Sub(h.Started)),
		zap.Int("consumers", h.Stats["consumers"]), zap.Int("upstream", h.Stats["upstream"]), zap.Int("pending", h.Stats["pending"]))
	u.record(o)
}

// runPreflight is `run --preflight`: what the old process asks of a new binary before it
// stops anything. Everything run checks before binding a socket, plus the settings in
// force (protobuf on stdin, from the running sidecar) under this binary's rules; then one
// JSON line (handover.PreflightReport) and exit 0.
func runPreflight(cmd *cobra.Command, f runFlags) error {
	if err := checkPollers(f.pollers); err != nil {
		return err
	}
	if f.xdsAddr != "" {
		if _, err := xds.NodeID(f.nodeID, os.Getenv); err != nil {
			return fmt.Errorf("--xds %s: %w", f.xdsAddr, err)
		}
	}
	layered, err := buildSettings(cmd, f)
	if err != nil {
		return err
	}
	if _, _, err := newLogger(layered.Settings.GetLog().GetLevel(), layered.Settings.GetLog().GetFormat()); err != nil {
		return err
	}
	if _, err := appprobe.Parse(os.Getenv(appprobe.EnvVar)); err != nil {
		return err
	}
	in := cmd.InOrStdin()
	if f, ok := in.(*os.File); ok {
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice != 0 {
			in = nil // a terminal: a person running --preflight by hand
		}
	}
	if in != nil {
		b, err := io.ReadAll(io.LimitReader(in, 16<<20))
		if err != nil {
			return fmt.Errorf("reading the settings in force: %w", err)
		}
		if len(b) > 0 {
			s := &sg.Settings{}
			if err := proto.Unmarshal(b, s); err != nil {
				return fmt.Errorf("the settings in force: %w", err)
			}
			if err := settings.Validate(settings.WithDefaults(s)); err != nil {
				return problemsError{"the settings in force are invalid for this binary", err}
			}
		}
	}
	b, err := json.Marshal(handover.PreflightReport{Preflight: "ok", Version: version, Format: handover.Format,
		Carries: []string{handover.CarriesHTTP2, handover.CarriesCompactConsumers}})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), string(b))
	return err
}
