package proxy

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/keepalive"
)

// A provider's drain: a provider that shuts down gracefully (READONLY, a closing=true
// answer) takes no new requests until it, or its successor, serves again; they wait
// in the hold queue (lifecycle.go has the table). Stormgate's own drain (Server.Drain)
// is another thing: this file is only about the provider's.

// providerDrain is a pool's drain of its provider.
type providerDrain struct {
	since atomic.Int64 // the provider is draining since; 0 when not
	gone  atomic.Bool  // a dial was refused: the draining provider no longer listens
	timer keepalive.Timer
}

// connDrain is one provider connection's part of its provider's drain.
type connDrain struct {
	gotReadonly atomic.Bool // the provider sent READONLY on this connection
	draining    atomic.Bool // a connection to the draining provider: readonly until the drain ends
	late        atomic.Bool // made during a drain: to the draining provider or to its successor
	probe       atomic.Bool // a heartbeat is out to tell which (probeAnswered)
}

// providerDrainTrigger labels stormgate_provider_drains_total{trigger}.
type providerDrainTrigger uint8

const (
	drainReadonly providerDrainTrigger = iota
	drainClosing
	nProviderDrainTriggers
)

var drainTriggerNames = [nProviderDrainTriggers]string{drainReadonly: "readonly", drainClosing: "closing"}

// draining reports whether the provider is shutting down gracefully.
func (p *pool) providerDraining() bool { return p.pdrain.since.Load() != 0 }

// checkClosing starts a drain when an answer says the provider is closing.
func (p *pool) checkClosing(frame []byte) {
	if !p.providerDraining() && p.srv.codec.Closing(frame) {
		p.startProviderDrain(drainClosing)
	}
}

// startProviderDrain stops sending new requests to the provider: every connection takes only
// what is in flight, new ones wait in the hold queue, until endProviderDrain.
func (p *pool) startProviderDrain(trigger providerDrainTrigger) {
	srv := p.srv
	now := srv.now()
	if !p.pdrain.since.CompareAndSwap(0, now) {
		return
	}
	p.pdrain.gone.Store(false)
	cfg := srv.cfg.Load()
	srv.m.life.drains[trigger].Inc()
	srv.log.Info("provider is shutting down gracefully: new requests wait in the hold queue until it is back",
		zap.String("provider", p.addr), zap.String("signal", drainTriggerNames[trigger]),
		zap.Duration("at_most", cfg.DrainTimeout), zap.String("requests", holdPolicyText(cfg)))
	for uc := range p.dubbo.conns() {
		uc.pdrain.draining.Store(true)
		uc.state.CompareAndSwap(stateReady, stateReadonly)
		uc.notRunFrom.Store(now)
	}
	srv.wheel.Schedule(&p.pdrain.timer, cfg.DrainTimeout)
	p.connChanged()
}

// endProviderDrain lets the provider's connections take requests again.
func (p *pool) endProviderDrain(why string) {
	srv := p.srv
	since := p.pdrain.since.Swap(0)
	if since == 0 {
		return
	}
	srv.wheel.Stop(&p.pdrain.timer)
	now := srv.now()
	srv.log.Info("provider drain over: connections take requests again", zap.String("provider", p.addr),
		zap.String("why", why), zap.Duration("after", time.Duration(now-since)))
	for uc := range p.dubbo.conns() {
		if !p.dubbo.retiring(uc.slot) {
			uc.pdrain.draining.Store(false)
			uc.pdrain.late.Store(false)
			uc.pdrain.probe.Store(false)
			uc.state.CompareAndSwap(stateReadonly, stateReady)
			uc.pdrain.gotReadonly.Store(false)
			uc.notRunFrom.Store(now)
		}
	}
	p.connChanged()
	p.hold.dispatch()
}

// followProviderDrain makes a new connection follow a drain in progress; call it right after the
// connection is stored in its slot. Until the drain ends it takes no requests: it may
// reach the draining provider (a Java server accepts and closes new connections while
// it closes; dubbo-go serves on until it exits) or its successor. Once the draining
// provider no longer listens (a refused dial), new connections are to the successor.
func (p *pool) followProviderDrain(uc *upConn) {
	if !p.providerDraining() || p.pdrain.gone.Load() {
		return
	}
	uc.pdrain.draining.Store(true)
	uc.pdrain.late.Store(true)
	uc.state.CompareAndSwap(stateReady, stateReadonly)
	if !p.providerDraining() { // endProviderDrain may have looked at the slots before uc was in one
		uc.pdrain.draining.Store(false)
		uc.pdrain.late.Store(false)
		uc.state.CompareAndSwap(stateReadonly, stateReady)
		return
	}
	p.advanceProviderDrain()
}

// dialFailed notes, during a drain, that the draining provider no longer listens:
// connections made from now on take requests; the drain ends once no connection to the
// old provider is left (a provider may close its listener first and drain its
// connections after).
func (p *pool) dialFailed() {
	if p.providerDraining() {
		p.pdrain.gone.Store(true)
		p.advanceProviderDrain()
	}
}

// advanceProviderDrain moves a drain on when connections close or open: once no connection that
// was open when the drain started is left, the drain ends if the provider no longer
// listens; otherwise each connection made since is probed with a heartbeat, and the
// first answer ends the drain (the provider serves new connections: its successor, or
// a draining dubbo-go provider that still serves and will say closing again). A Java
// server that is closing closes new connections without answering.
func (p *pool) advanceProviderDrain() {
	if !p.providerDraining() {
		return
	}
	var late []*upConn
	for uc := range p.dubbo.conns() {
		if !uc.pdrain.draining.Load() || uc.state.Load() == stateClosed {
			continue
		}
		if !uc.pdrain.late.Load() {
			return // a connection to the draining provider is still open
		}
		late = append(late, uc)
	}
	if p.pdrain.gone.Load() {
		p.endProviderDrain("the draining provider stopped listening and its connections are closed")
		return
	}
	for _, uc := range late {
		if uc.pdrain.probe.CompareAndSwap(false, true) {
			var buf [64]byte
			uc.sendControl(p.srv.codec.AppendHeartbeatRequest(buf[:0], 0), true) // the id is the connection's
		}
	}
}

// probeAnswered ends a drain: a connection made after the draining provider's last
// connection closed answered its heartbeat.
func (p *pool) probeAnswered(uc *upConn) {
	uc.pdrain.probe.Store(false)
	p.endProviderDrain("the provider answers on a new connection after its old ones closed")
}

// sendToDrainingProvider sends a request whose hold ended on a connection of a draining
// provider that still serves, rather than failing it.
func (p *pool) sendToDrainingProvider(r request, frame []byte) bool {
	if !p.providerDraining() || r.sess.closing.Load() {
		return false
	}
	for uc := range p.dubbo.conns() {
		if !p.dubbo.retiring(uc.slot) && uc.sendIn(r, frame, true) {
			return true
		}
	}
	return false
}
