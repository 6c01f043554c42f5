package main

import (
	"context"
	"os"
	"syscall"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/peer"
)

// runTripleEcho is `stormbench echo-provider --protocol triple`: peer.TripleEcho until a signal, with
// the same stdout lines as the Dubbo echo provider (listening, stats, final; exit status 3 on any
// violation), the stats under "triple".
func runTripleEcho(ctx context.Context, o echoOptions, log *zap.Logger, sigs <-chan os.Signal, emit func(echoEvent)) error {
	// SIGUSR1 and SIGUSR2 (the Dubbo echo provider's kill and calm) arrive on sigs too and are
	// ignored here, not left to their default action, which ends the process.
	cfg := o.triple
	cfg.Addr = o.listen
	p, err := peer.StartTripleEcho(cfg, log)
	if err != nil {
		return err
	}
	emit(echoEvent{Event: "listening", Addr: p.Addr()})
	log.Info("triple echo provider listening", zap.String("addr", p.Addr()))
	statsC, stopStats := ticks(o.statsEvery)
	defer stopStats()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case sig := <-sigs:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				break loop
			}
		case <-statsC:
			st := p.Stats()
			emit(echoEvent{Event: "stats", Triple: &st})
		}
	}
	_ = p.Close()
	st := p.Stats()
	emit(echoEvent{Event: "final", Triple: &st, Violations: p.Violations()})
	return violationsExit(st.Violations)
}
