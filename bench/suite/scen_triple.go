package main

import (
	"context"
	"time"
)

// The Triple rows (issue 27) are the Dubbo scenarios again with dubbo-go v3.3.0's Triple provider
// (dgprovider --protocol triple), h2c consumers (stormbench load --protocol triple: unary calls to
// /org.stormgate.Greeter/Echo, PINGs as heartbeats) and HAProxy in HTTP mode speaking HTTP/2 on both
// sides: triple-idle (scen_idle.go), triple-forward (scen_forward.go), triple-restart
// (scen_restart.go), and triple-ping below.

// Arms of the triple-ping scenario.
const (
	armDubbo  = "dubbo"
	armTriple = "triple"
)

// profileTriplePing is the triple-ping scenario's profile key.
const profileTriplePing = "triple-ping"

// runTriplePing measures Stormgate's CPU per answered PING against its CPU per answered Dubbo
// heartbeat: two Stormgates, one in front of dubbo-go's Dubbo provider with HBConns Dubbo consumers
// heartbeating every second, one in front of its Triple provider with as many h2c consumers PINGing
// every second, sampled in alternating windows as the heartbeat scenario samples its targets (the
// other arm's load stopped). The figure is the median of the rounds' ratios.
func (s *Suite) runTriplePing(ctx context.Context) (*HeartbeatResult, error) {
	o := s.opt
	res := &HeartbeatResult{Conns: o.HBConns, Period: time.Second, Window: o.HBWindow, Settle: o.HBSettle, Pairs: o.HBPairs,
		Commands: map[string]string{}, HBFailed: map[string]uint64{}, HBLate: map[string]uint64{}}
	err := s.triplePing(ctx, res)
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

func (s *Suite) triplePing(ctx context.Context, res *HeartbeatResult) error {
	var arms []hbArm
	for _, a := range []struct{ name, provider string }{{armDubbo, dubboGoProvider}, {armTriple, dubboGoTriple}} {
		_, px, stop, err := s.startPair(ctx, a.provider, stormgate, 0)
		if err != nil {
			return err
		}
		defer stop()
		arms = append(arms, hbArm{name: a.name, px: px})
	}
	return s.alternateWindows(ctx, res, arms, profileTriplePing)
}
