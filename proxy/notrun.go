package proxy

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Not-executed answers: within hold.not_executed_window of a provider connection
// opening, or of the provider saying READONLY, WRITEABLE or closing (the window starts
// at upConn.notRunFrom), an answer that proves the request never ran (no exporter
// yet, a full thread pool: the codec's NotExecuted) sends the request back to the
// hold queue, at most hold.not_executed_retries times and only if the retry can leave
// before its hold ends; the pool then pauses sending backoff_base, doubling with each
// such answer in a row, capped at backoff_max.

// notRunPause is a pool's pause after not-executed answers.
type notRunPause struct {
	until  atomic.Int64 // no request goes out before this after a not-executed answer
	streak atomic.Int32 // not-executed answers since the last ordinary one
}

// inWindow reports whether not-executed answers on this connection are re-held now.
func (uc *upConn) inWindow(now int64, cfg *Config) bool {
	return cfg.NotExecutedWindow > 0 && now-uc.notRunFrom.Load() < int64(cfg.NotExecutedWindow)
}

// reholdNotExecuted puts a request back in the hold queue when the provider's answer
// proves it never ran and the rules allow; false leaves the answer to be passed on.
func (uc *upConn) reholdNotExecuted(pe pending, frame []byte, now int64) bool {
	p := uc.pool
	srv := p.srv
	why := srv.codec.NotExecuted(frame)
	if why == "" {
		p.pause.answered()
		return false
	}
	cfg := srv.cfg.Load()
	outcome := NotRunPassedOn
	switch {
	case !uc.inWindow(now, cfg):
		outcome = NotRunOutsideWindow
	case int(pe.tries) < cfg.NotExecutedRetries:
		b, ok := uc.replayCopy(pe.off, pe.n)
		if !ok {
			break
		}
		d := p.pause.nextPause(cfg)
		srv.sendByOf(&pe.request, b, cfg)
		if now+int64(d) >= holdUntil(&pe.request, cfg) {
			break // its hold would end before the retry: the provider's own answer is the better one
		}
		pe.tries++
		srv.m.life.notRunCounter(why, NotRunReheld).Inc()
		p.pause.pause(now, d)
		if pe.tries == 1 {
			srv.log.Debug("the provider answered that it did not run a request; holding it and retrying",
				zap.String("provider", p.addr), zap.String("answer", why), zap.Duration("pause", d))
		}
		p.hold.rehold([]held{{request: pe.request, frame: b}}, HoldReheldNotRun)
		return true
	}
	srv.m.life.notRunCounter(why, outcome).Inc()
	return false
}

// answered notes an ordinary answer: the provider serves, pauses start small again.
func (l *notRunPause) answered() {
	if l.streak.Load() != 0 {
		l.streak.Store(0)
	}
}

// nextPause is how long the next not-executed answer stops sending: backoff_base,
// doubling with each such answer in a row, capped at backoff_max.
func (l *notRunPause) nextPause(cfg *Config) time.Duration {
	d := cfg.BackoffBase << min(l.streak.Load(), 20)
	if d > cfg.BackoffMax || d <= 0 {
		d = cfg.BackoffMax
	}
	return d
}

// pause stops sending until now+d and counts one more not-executed answer in a row.
func (l *notRunPause) pause(now int64, d time.Duration) {
	l.streak.Add(1)
	until := now + int64(d)
	for {
		old := l.until.Load()
		if old >= until || l.until.CompareAndSwap(old, until) {
			return
		}
	}
}

// shortenPause ends a pause by until at the latest (backoff_max lowered live).
func (l *notRunPause) shortenPause(until int64) {
	for {
		old := l.until.Load()
		if old <= until || l.until.CompareAndSwap(old, until) {
			return
		}
	}
}

// paused reports whether sending waits for a pause, and until when.
func (p *pool) paused() (until int64, ok bool) {
	u := p.pause.until.Load()
	if u == 0 {
		return 0, false
	}
	if p.srv.now() >= u {
		p.pause.until.CompareAndSwap(u, 0)
		return 0, false
	}
	return u, true
}

// not-executed answer outcomes, labels of stormgate_not_executed_answers_total{outcome}.
type NotRunOutcome uint8

const (
	NotRunReheld NotRunOutcome = iota
	NotRunPassedOn
	NotRunOutsideWindow
	nNotRunOutcomes
)

// String is o's outcome label (stormgate_not_executed_total{outcome}).
func (o NotRunOutcome) String() string { return notRunOutcomeNames[o] }

var notRunOutcomeNames = [nNotRunOutcomes]string{
	NotRunReheld:        "reheld",
	NotRunPassedOn:      "passed_on",
	NotRunOutsideWindow: "outside_window",
}
