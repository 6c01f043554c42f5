package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stormgate/stormgate/peer"
)

// demoProvider is the demo's provider, whichever protocol it speaks: what the live lines and the
// summary read from it.
type demoProvider interface {
	Addr() string
	Close() error
	Name() string
	HeartbeatName() string // what consumers' keepalives are called in this protocol
	Stats() demoProviderStats
	Violations() uint64 // integrity violations the provider recorded (the Dubbo demo provider records none)
}

type demoProviderStats struct {
	connsOpen                           int64
	connsAccepted, requests, heartbeats uint64 // heartbeats: consumers' keepalives that reached it
}

type dubboDemoProvider struct{ *peer.Provider }

func (dubboDemoProvider) Name() string          { return "demo Dubbo provider" }
func (dubboDemoProvider) HeartbeatName() string { return "heartbeats" }
func (dubboDemoProvider) Violations() uint64    { return 0 }
func (p dubboDemoProvider) Stats() demoProviderStats {
	s := p.Provider.Stats()
	return demoProviderStats{connsOpen: s.ConnsOpen, connsAccepted: s.ConnsAccepted, requests: s.Requests, heartbeats: s.HeartbeatsReceived}
}

type tripleDemoProvider struct{ *peer.TripleEcho }

func (tripleDemoProvider) Name() string          { return "Triple echo provider, h2c" }
func (tripleDemoProvider) HeartbeatName() string { return "PINGs" }
func (p tripleDemoProvider) Violations() uint64  { return p.TripleEcho.Stats().Violations }
func (p tripleDemoProvider) Stats() demoProviderStats {
	s := p.TripleEcho.Stats()
	return demoProviderStats{connsOpen: s.ConnsOpen, connsAccepted: s.ConnsAccepted, requests: s.Requests, heartbeats: s.LoadPings}
}

// gatheredCounter sums the counter name over its series in reg (0 when absent).
func gatheredCounter(reg prometheus.Gatherer, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue()
		}
	}
	return v
}
