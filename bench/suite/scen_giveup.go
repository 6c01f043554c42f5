package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// GiveUpResult is the give-up scenario (issue 22): the real dubbo-go consumer calls the real
// dubbo-go provider with a per-call timeout, which dubbo-go sends in each request's `timeout`
// attachment; the provider is SIGKILLed and started again Down later, a restart much longer than
// the consumers' patience when the timeout is short. A consumer that gives up on a call has
// moved on (a Java consumer retries it on another provider), so the call must not run after
// that: the figure is how many failed calls ran at the restarted provider, which logs every call
// it runs (dgprovider --log-requests; the killed provider logs to a file of its own).
type GiveUpResult struct {
	Workers  int             `json:"workers"`
	Interval time.Duration   `json:"interval_ns"`
	Duration time.Duration   `json:"duration_ns"`
	KillAt   time.Duration   `json:"kill_at_ns"`
	Down     time.Duration   `json:"down_ns"`
	Timeouts []time.Duration `json:"timeouts_ns"`
	Rows     []GiveUpRow     `json:"rows"`
}

// GiveUpRow is one target at one consumer timeout.
type GiveUpRow struct {
	Target  string        `json:"target"`
	Timeout time.Duration `json:"timeout_ns"`
	Command string        `json:"command"`

	Sent     int `json:"sent"`
	OK       int `json:"ok"`
	Failed   int `json:"failed"`   // errors and timeouts at the consumer
	Timeouts int `json:"timeouts"` // of which the consumer's own timeout
	// RanAfterGiveUp are failed calls that the restarted provider ran: the consumer had given
	// up on them (must be 0).
	RanAfterGiveUp int `json:"ran_after_give_up"`
	// ReadByKilled are failed calls that the killed provider had run (their answers died with it).
	ReadByKilled int `json:"read_by_killed"`
	// RanTwice are calls that both providers ran (must be 0).
	RanTwice int `json:"ran_twice"`
	// AnsweredAtDeadline is Stormgate's count of held calls it answered at their deadline
	// without sending them (stormgate_local_replies_total{reason="deadline"}).
	AnsweredAtDeadline float64       `json:"answered_at_deadline"`
	DownFor            time.Duration `json:"down_for_ns"`
	Error              string        `json:"error,omitempty"`
}

// giveUpSummary is the part of dgconsumer's loop summary the scenario reads.
type giveUpSummary struct {
	Mode       string   `json:"mode"`
	Sent       int      `json:"sent"`
	OK         int      `json:"ok"`
	Errors     int      `json:"errors"`
	Timeouts   int      `json:"timeouts"`
	Mismatches int      `json:"mismatches"`
	FailedArgs []string `json:"failed_args"`
}

func (s *Suite) runGiveUp(ctx context.Context) (*GiveUpResult, error) {
	o := s.opt
	res := &GiveUpResult{Workers: o.GiveUpWorkers, Interval: o.GiveUpInterval, Duration: o.GiveUpDuration,
		KillAt: o.GiveUpKillAt, Down: o.GiveUpDown, Timeouts: o.GiveUpTimeouts}
	var err error
	res.Rows, err = rowPerTarget(ctx, s, "give-up", o.GiveUpTimeouts,
		func(tg string, timeout time.Duration) (GiveUpRow, error) { return s.giveUpTarget(ctx, tg, timeout) },
		func(r *GiveUpRow, e string) { r.Error = e })
	return res, err
}

func (s *Suite) giveUpTarget(ctx context.Context, tg string, timeout time.Duration) (GiveUpRow, error) {
	o := s.opt
	row := GiveUpRow{Target: tg, Timeout: timeout}
	name := fmt.Sprintf("giveup-%s-%v", tg, timeout)
	killedLog, restartedLog := filepath.Join(s.out, name+"-killed.calls"), filepath.Join(s.out, name+"-restarted.calls")
	for _, f := range []string{killedLog, restartedLog} {
		_ = os.Remove(f)
	}
	prov, err := s.startProvider(ctx, dubboGoProvider, 0, "", 0, "--log-requests", killedLog)
	if err != nil {
		return row, err
	}
	defer func() { prov.proc.Kill() }()
	px, err := s.startProxy(ctx, tg, prov, proxyOpts{})
	if err != nil {
		return row, err
	}
	defer px.stop()

	args := []string{"--addr", px.addr, "--timeout", timeout.String(), "loop", "--duration", o.GiveUpDuration.String(),
		"--interval", o.GiveUpInterval.String(), "--workers", strconv.Itoa(o.GiveUpWorkers)}
	row.Command = "dgconsumer " + strings.Join(append([]string{"--addr", "$" + targetVar(tg)}, args[2:]...), " ")
	var summary string
	cons, err := s.start(ctx, procSpec{name: "dgconsumer-" + name, argv: append([]string{s.bins.dgconsumer}, args...),
		bound: o.GiveUpDuration + 2*timeout + time.Minute,
		onLine: func(line string) {
			if strings.HasPrefix(line, `{"mode":"loop"`) {
				summary = line
			}
		}})
	if err != nil {
		return row, err
	}
	defer cons.Kill()
	if err := sleepCtx(ctx, o.GiveUpKillAt); err != nil {
		return row, err
	}
	m0 := s.snapshot(ctx, nil, px, nil).m
	tKill := time.Now()
	prov.proc.Kill()
	if err := sleepCtx(ctx, o.GiveUpDown); err != nil {
		return row, err
	}
	prov, err = s.startProvider(ctx, dubboGoProvider, prov.port, "", 0, "--log-requests", restartedLog)
	if err != nil {
		return row, fmt.Errorf("restarting the provider: %w", err)
	}
	row.DownFor = time.Since(tKill).Round(time.Millisecond)
	s.logf("  give-up %s, timeout %v: provider back after %v", tg, timeout, row.DownFor)
	_ = cons.Wait() // dgconsumer exits 1 when a call failed
	m1 := s.snapshot(ctx, nil, px, nil).m
	var sum giveUpSummary
	if err := json.Unmarshal([]byte(summary), &sum); err != nil || sum.Mode != "loop" {
		return row, fmt.Errorf("dgconsumer printed no summary (%v); see %s", err, cons.LogPath)
	}
	killed, err := readCallLog(killedLog)
	if err != nil {
		return row, err
	}
	restarted, err := readCallLog(restartedLog)
	if err != nil {
		return row, err
	}
	row.Sent, row.OK, row.Failed, row.Timeouts = sum.Sent, sum.OK, len(sum.FailedArgs), sum.Timeouts
	for _, arg := range sum.FailedArgs {
		switch {
		case restarted[arg]:
			row.RanAfterGiveUp++
		case killed[arg]:
			row.ReadByKilled++
		}
	}
	for arg := range killed {
		if restarted[arg] {
			row.RanTwice++
		}
	}
	row.AnsweredAtDeadline = delta(m0, m1, "stormgate_local_replies_total", `reason="deadline"`)
	s.logf("  give-up %s, timeout %v: %d calls, %d failed (%d timeouts), %d ran after their consumer gave up, %d read by the killed provider, %d ran twice",
		tg, timeout, row.Sent, row.Failed, row.Timeouts, row.RanAfterGiveUp, row.ReadByKilled, row.RanTwice)
	if sum.Mismatches > 0 {
		return row, fmt.Errorf("%d answers were another call's", sum.Mismatches)
	}
	return row, nil
}

// readCallLog reads a dgprovider --log-requests file ("<method> <arg>" per line) into the set of
// arguments it ran; a file that does not exist is an empty set (the provider ran nothing).
func readCallLog(path string) (map[string]bool, error) {
	ran := map[string]bool{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return ran, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if _, arg, ok := strings.Cut(sc.Text(), " "); ok {
			ran[arg] = true
		}
	}
	return ran, sc.Err()
}
