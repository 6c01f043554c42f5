package main

import (
	"errors"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// liveSettings changes the settings of a running sidecar: from an xDS push
// (apply) or from the --config file again on SIGHUP (reload). One change at a
// time; each is checked once and whole (settings.Store.Update: Validate and
// CheckLive, every problem at once) before any stage sees it.
type liveSettings struct {
	mu    sync.Mutex
	log   *zap.Logger
	store *settings.Store
	srv   stage[proxy.Config]     // *proxy.Server
	adm   stage[admission.Config] // *admission.Admitter
	level zap.AtomicLevel
}

// stage is what a change needs of a stage: Check says whether Update would take
// cfg without changing anything; Update applies it.
type stage[C any] interface {
	Check(cfg C) error
	Update(cfg C) error
}

// apply makes pushed (partial settings: what the control plane sets) live
// over the startup settings in every stage, or refuses it; the error names
// each field (it becomes the NACK's error_detail).
func (l *liveSettings) apply(pushed *sg.Settings, version, source string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.store.Settings()
	next := settings.Merge(l.store.Base().Settings, pushed)
	if err := l.store.Update(next, version, source, func() error { return l.stages(next) }); err != nil {
		return err
	}
	l.logApplied(prev, next, version, source)
	return nil
}

// reload re-reads the settings file and flags with read (SIGHUP) and applies
// them like a push: all or nothing. A file that fails is logged like a NACK,
// with every problem (with its file line), and recorded as /config_dump's
// last_rejected; the running settings stay.
func (l *liveSettings) reload(file string, read func() (startupSettings, error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev := l.store.Load()
	next, err := read()
	version := ""
	if next.Settings != nil {
		version = settings.Version(next.Settings) // also of a file that fails: the version it would have had
	}
	if err == nil {
		err = next.explain(l.store.Rebase(next.Layered, version, settings.SourceFile, func() error { return l.stages(next.Settings) }))
	}
	if err != nil {
		l.store.Reject(version, settings.SourceFile, err)
		l.log.Warn("settings file rejected; keeping the running settings", zap.String("file", file),
			zap.String("version", version), zap.String("running_version", prev.Version), zap.Strings("problems", problemStrings(err)))
		return
	}
	l.logApplied(prev.Settings, next.Settings, version, settings.SourceFile)
}

// stages asks every stage whether it takes its part of next (checked
// settings), and only then hands each its part: a change reaches every stage
// or none.
func (l *liveSettings) stages(next *sg.Settings) error {
	pc, ac := settings.ProxyConfig(next), settings.AdmissionConfig(next)
	if err := l.srv.Check(pc); err != nil {
		return err
	}
	if err := l.adm.Check(ac); err != nil {
		return err
	}
	// Admission first: its Update may still meet a kernel refusal (listen(2) with a new
	// backlog), and then nothing has changed anywhere. The proxy's cannot fail after Check.
	if err := l.adm.Update(ac); err != nil {
		return err
	}
	if err := l.srv.Update(pc); err != nil {
		l.log.Error("BUG: the proxy refused settings it had accepted; listener settings are ahead of it", zap.Error(err))
		return err
	}
	if lv, err := zap.ParseAtomicLevel(next.GetLog().GetLevel()); err == nil {
		l.level.SetLevel(lv.Level())
	}
	for _, w := range settings.Warnings(next) {
		l.log.Warn("settings warning", zap.String("field", w.Field), zap.String("warning", w.Message))
	}
	return nil
}

// logApplied logs what changed, field by field ("hold.timeout: 3s -> 5s").
func (l *liveSettings) logApplied(prev, next *sg.Settings, version, source string) {
	l.log.Info("settings applied", zap.String("source", source), zap.String("version", version),
		zap.Strings("changed", settings.ChangeStrings(settings.Changes(prev, next))))
}

// problemStrings lists the problems in err one per entry (a log field).
func problemStrings(err error) []string {
	var pe problemsError
	if errors.As(err, &pe) {
		err = pe.err
	}
	var ps settings.Problems
	if !errors.As(err, &ps) {
		return []string{err.Error()}
	}
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Error()
	}
	return out
}

// problemsError prints problems one per indented line, for the terminal;
// errors.As still finds the settings.Problems inside.
type problemsError struct {
	head string
	err  error
}

func (e problemsError) Error() string {
	return e.head + ":\n  " + strings.Join(problemStrings(e.err), "\n  ")
}

func (e problemsError) Unwrap() error { return e.err }

// reloadOnHUP handles SIGHUP: re-read --config and the flags and apply them.
// With --xds the control plane owns the settings and the file is only the
// base its pushes merge over, fixed at start: reloading it would be undone by
// the next push, so SIGHUP is refused, and says so.
func reloadOnHUP(live *liveSettings, cmd *cobra.Command, f runFlags) {
	switch {
	case f.xdsAddr != "":
		live.log.Warn("SIGHUP ignored: with --xds the control plane owns the settings; change them there "+
			"(--config and the flags are the base its pushes merge over, read once at start: restart to change them)",
			zap.String("xds_server", f.xdsAddr))
	case f.config == "":
		live.log.Warn("SIGHUP ignored: there is no --config file to reload")
	default:
		live.log.Info("SIGHUP: reloading the settings file", zap.String("file", f.config))
		live.reload(f.config, func() (startupSettings, error) { return readSettings(cmd, f) })
	}
}
