package main

import (
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/handover"
	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// origin is where run's plane comes from: a fresh start reads its settings and binds its
// sockets; a restore (the new image of an upgrade, or the old one after a rollback: see
// upgrade.go and restore.go) takes over what the old image handed over. start asks it for
// each part in turn; any failure before the plane serves ends in fail.
type origin interface {
	// settings returns the base (defaults < file < flags) and the settings in force.
	settings(cmd *cobra.Command, f runFlags) (base settings.Layered, active *sg.Settings, err error)
	store(base settings.Layered, active *sg.Settings, reg prometheus.Registerer) (*settings.Store, error)
	// listeners returns the metrics and admin listeners, by name, that f turns on.
	listeners(f runFlags) (map[string]net.Listener, error)
	admitter(cfg admission.Config, log *zap.Logger, reg prometheus.Registerer) (*admission.Admitter, error)
	proxy(cfg proxy.Config, opts proxy.Options) (*proxy.Server, error)
	// fail gives up before serving and returns what run returns; log is nil before there is one.
	fail(log *zap.Logger, err error) error
	// serving is called once the plane serves.
	serving(u *upgrader, log *zap.Logger)
	// upgraded says whether the plane was handed over (restored).
	upgraded() bool
}

// newOrigin reads the environment: a handover state makes this run a restore.
func newOrigin() (origin, error) {
	in, err := handover.FromEnv()
	if in == nil {
		return &fresh{}, err
	}
	rs := &restoring{in: in, start: time.Now()}
	if err != nil {
		return nil, rs.fail(nil, err)
	}
	return rs, nil
}

// fresh is a start from nothing: the settings from defaults, file and flags; every socket
// bound here. A failure closes what it bound.
type fresh struct {
	base   settings.Layered
	opened []io.Closer
}

func (o *fresh) settings(cmd *cobra.Command, f runFlags) (settings.Layered, *sg.Settings, error) {
	base, err := buildSettings(cmd, f)
	o.base = base
	return base, base.Settings, err
}

func (o *fresh) store(base settings.Layered, _ *sg.Settings, reg prometheus.Registerer) (*settings.Store, error) {
	return settings.NewLayeredStore(base, settings.Version(base.Settings), reg)
}

func (o *fresh) listeners(f runFlags) (map[string]net.Listener, error) {
	lns, err := bindHTTP(map[string]net.Listener{}, f)
	for _, ln := range lns {
		o.opened = append(o.opened, ln)
	}
	return lns, err
}

func (o *fresh) admitter(cfg admission.Config, log *zap.Logger, reg prometheus.Registerer) (*admission.Admitter, error) {
	adm, err := admission.Listen(cfg, log, reg)
	if err != nil {
		return nil, listenerError(o.base, err)
	}
	o.opened = append(o.opened, adm)
	return adm, nil
}

func (o *fresh) proxy(cfg proxy.Config, opts proxy.Options) (*proxy.Server, error) {
	return proxy.New(cfg, opts)
}

func (o *fresh) fail(_ *zap.Logger, err error) error {
	for _, c := range o.opened {
		c.Close()
	}
	o.opened = nil
	return err
}

func (o *fresh) serving(*upgrader, *zap.Logger) { o.opened = nil }
func (o *fresh) upgraded() bool                 { return false }

// bindHTTP binds the metrics and admin listeners that f turns on and lns does not hold yet.
// A port clash fails here, before any consumer is accepted; lns is then closed.
func bindHTTP(lns map[string]net.Listener, f runFlags) (map[string]net.Listener, error) {
	for _, l := range []struct{ name, addr string }{{"metrics", f.metrics}, {"admin", f.admin}} {
		if l.addr == "" || lns[l.name] != nil {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, ln := range lns {
				ln.Close()
			}
			return nil, fmt.Errorf("--%s %s: %w (pick a free address, or --%s '' to turn it off)", l.name, l.addr, err, l.name)
		}
		lns[l.name] = ln
	}
	return lns, nil
}
