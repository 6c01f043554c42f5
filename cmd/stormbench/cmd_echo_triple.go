package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/stormgate/stormgate/peer"
)

// runTripleEcho is `stormbench echo-provider --protocol triple`: peer.TripleEcho until a signal, with
// the same stdout lines as the Dubbo echo provider (listening, killed, restarted, stats, final; exit
// status 3 on any violation), the stats under "triple". SIGUSR1 and --restart-every kill it (--kill says
// how) and restart it --down later, as the Dubbo one; SIGUSR2 (the Dubbo one's calm: it reads normally
// anyway) is ignored, not left to its default action, which ends the process.
func runTripleEcho(ctx context.Context, o echoOptions, log *zap.Logger, sigs <-chan os.Signal, emit func(echoEvent)) error {
	killMode, err := peer.ParseKillMode(o.kill)
	if err != nil {
		return fmt.Errorf("--kill: %w", err)
	}
	cfg := o.triple
	cfg.Addr, cfg.Kill = o.listen, killMode
	p, err := peer.StartTripleEcho(cfg, log)
	if err != nil {
		return err
	}
	emit(echoEvent{Event: "listening", Addr: p.Addr()})
	log.Info("triple echo provider listening", zap.String("addr", p.Addr()))
	statsC, stopStats := ticks(o.statsEvery)
	defer stopStats()
	restartC, stopRestart := ticks(o.restart)
	defer stopRestart()
	up := time.NewTimer(time.Hour)
	up.Stop()
	defer up.Stop()
	kill := func() {
		p.Kill()
		emit(echoEvent{Event: "killed"})
		up.Reset(o.down)
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case sig := <-sigs:
			switch sig {
			case syscall.SIGUSR1:
				kill()
			case syscall.SIGUSR2:
			default:
				break loop
			}
		case <-restartC:
			kill()
		case <-up.C:
			if err := p.Restart(); err != nil {
				_ = p.Close()
				return fmt.Errorf("restart: %w", err)
			}
			emit(echoEvent{Event: "restarted", Addr: p.Addr()})
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
