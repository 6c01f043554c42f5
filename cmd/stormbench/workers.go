package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/loadgen"
	"github.com/stormgate/stormgate/loadgen/hist"
)

// Worker protocol, one JSON value per line.
//
//	parent → worker stdin:  the worker's loadgen.Config, then "go" once every worker has connected.
//	                        EOF on stdin at any time cancels the worker's run (the parent is gone).
//	worker → parent stdout: {"type":"progress"} each second, {"type":"connected"} after the connect
//	                        phase, then {"type":"result"} (and {"type":"error"} if the run failed).
type workerMsg struct {
	Type     string            `json:"type"`
	Snapshot *loadgen.Snapshot `json:"snapshot,omitempty"`
	Conns    int               `json:"conns,omitempty"`
	Result   json.RawMessage   `json:"result,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// Lines the parent writes to a worker's stdin after its config: start the request phase, and
// pause or resume it (SIGUSR1/SIGUSR2 to the parent).
const (
	goLine     = "go"
	pauseLine  = "pause"
	resumeLine = "resume"
)

func newWorkerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "worker",
		Short:  "internal: one worker process of `stormbench load` (reads its config on stdin)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C reaches the whole process group; the parent decides (it closes our stdin).
			signal.Ignore(os.Interrupt)
			return runWorker(cmd.Context(), os.Stdin, os.Stdout)
		},
	}
}

func runWorker(ctx context.Context, in io.Reader, out io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	br := bufio.NewReaderSize(in, 1<<16)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("worker: reading config: %w", err)
	}
	var cfg loadgen.Config
	if err := json.Unmarshal(line, &cfg); err != nil {
		return fmt.Errorf("worker: config: %w", err)
	}
	// The stdin reader lives as long as the process: it blocks in read(2) on a pipe, which nothing
	// in-process can interrupt; the process exits right after the run.
	start := make(chan struct{})
	cfg.Pause = new(atomic.Bool)
	go func() {
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				cancel() // parent gone
				return
			}
			switch l {
			case goLine + "\n":
				close(start)
			case pauseLine + "\n":
				cfg.Pause.Store(true)
			case resumeLine + "\n":
				cfg.Pause.Store(false)
			}
		}
	}()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(m workerMsg) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(m)
	}
	cfg.WaitStart = func(ctx context.Context, connected int) error {
		emit(workerMsg{Type: "connected", Conns: connected})
		select {
		case <-start:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	res, runErr := loadgen.Run(ctx, cfg, func(s loadgen.Snapshot) {
		emit(workerMsg{Type: "progress", Snapshot: &s})
	})
	if res != nil {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		emit(workerMsg{Type: "result", Result: b})
	}
	if runErr != nil && ctx.Err() == nil {
		emit(workerMsg{Type: "error", Error: runErr.Error()})
		return runErr
	}
	return nil // cancelled by the parent: the (partial) result says Interrupted
}

// workerProc is the parent's view of one worker.
type workerProc struct {
	cmd       *exec.Cmd
	stdin     io.WriteCloser
	connected bool
	done      bool
	result    *loadgen.Result
	errMsg    string
}

type indexedMsg struct {
	i   int
	msg workerMsg
	eof error // set on the last message of a worker: its stdout ended
}

// interruptGrace is how long workers get to report a partial result after an interrupt.
const interruptGrace = 10 * time.Second

// runWorkers runs cfg split over n worker processes of this executable and merges their results.
// Cancelling ctx closes the workers' stdin (they stop and report what they have); workers still
// running interruptGrace later, or past runBound, are killed.
// A value on pauses (nil: none) pauses (true) or resumes (false) every worker's request phase.
func runWorkers(ctx context.Context, cfg loadgen.Config, n int, progress func(loadgen.Snapshot), pauses <-chan bool) (*loadgen.Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	hardCtx, kill := context.WithTimeout(context.WithoutCancel(ctx), runBound(cfg, n))
	defer kill()
	msgs := make(chan indexedMsg, 64)
	var readers sync.WaitGroup
	var procs []*workerProc
	closeInputs := sync.OnceFunc(func() {
		for _, p := range procs {
			_ = p.stdin.Close()
		}
	})
	defer func() {
		closeInputs()
		for _, p := range procs {
			_ = p.cmd.Wait()
		}
	}()
	var startErr error
	for i, wc := range splitConfig(cfg, n) {
		if startErr = startWorker(hardCtx, exe, i, wc, &procs, &readers, msgs); startErr != nil {
			break
		}
	}
	go func() { readers.Wait(); close(msgs) }() // ends when every started worker's stdout has ended
	if startErr != nil {
		kill()
		for range msgs { // let the readers finish
		}
		return nil, startErr
	}

	var (
		latest  = make([]loadgen.Snapshot, n)
		window  = new(hist.Histogram)
		started bool
		tick    = time.NewTicker(time.Second)
		done    = ctx.Done()
	)
	defer tick.Stop()
	printed := false
	emit := func() {
		if progress == nil || !anyProgress(latest) {
			return
		}
		var agg loadgen.Snapshot
		for _, s := range latest {
			s.Window = nil
			agg.Add(s, nil)
		}
		agg.Window, agg.P50, agg.P99 = window, window.Percentile(0.5), window.Percentile(0.99)
		progress(agg)
		window.Reset()
		printed = true
	}
	for msgs != nil {
		select {
		case <-done:
			done = nil
			closeInputs()
			time.AfterFunc(interruptGrace, kill)
		case m, ok := <-msgs:
			if !ok {
				msgs = nil
				continue
			}
			handleWorkerMsg(procs[m.i], m, latest, window)
			if !started && allReady(procs) {
				started = true
				for _, p := range procs {
					if !p.done {
						_, _ = io.WriteString(p.stdin, goLine+"\n")
					}
				}
			}
		case p := <-pauses:
			line := resumeLine
			if p {
				line = pauseLine
			}
			for _, w := range procs {
				if !w.done {
					_, _ = io.WriteString(w.stdin, line+"\n")
				}
			}
		case <-tick.C:
			emit()
		}
	}
	// A run shorter than the ticker's phase against the workers' own (slow worker
	// start-up) would otherwise end without a single progress line.
	if !printed {
		emit()
	}

	merged := &loadgen.Result{}
	var errs []error
	for i, p := range procs {
		if p.result != nil {
			merged.Merge(p.result)
		}
		if p.errMsg != "" {
			errs = append(errs, fmt.Errorf("worker %d: %s", i, p.errMsg))
		} else if p.result == nil {
			errs = append(errs, fmt.Errorf("worker %d: exited without a result", i))
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	if merged.Workers == 0 {
		return nil, errors.Join(errs...)
	}
	return merged, errors.Join(errs...)
}

func startWorker(ctx context.Context, exe string, i int, cfg loadgen.Config, procs *[]*workerProc,
	readers *sync.WaitGroup, msgs chan<- indexedMsg) error {
	cmd := exec.CommandContext(ctx, exe, "worker")
	cmd.Stderr = os.Stderr
	stdin, stdout, err := startChild(cmd, i)
	if err != nil {
		return err
	}
	*procs = append(*procs, &workerProc{cmd: cmd, stdin: stdin})
	readers.Go(func() { readWorker(i, stdout, msgs) })
	b, err := json.Marshal(cfg)
	if err == nil {
		_, err = stdin.Write(append(b, '\n'))
	}
	if err != nil {
		return fmt.Errorf("worker %d: %w", i, err)
	}
	return nil
}

// startChild starts worker i (a process of this binary) with its stdin and
// stdout piped to the parent.
func startChild(cmd *exec.Cmd, i int) (io.WriteCloser, io.ReadCloser, error) {
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting worker %d: %w", i, err)
	}
	return stdin, stdout, nil
}

func handleWorkerMsg(p *workerProc, m indexedMsg, latest []loadgen.Snapshot, window *hist.Histogram) {
	switch {
	case m.eof != nil:
		p.done = true
		if m.eof != io.EOF && p.errMsg == "" {
			p.errMsg = m.eof.Error()
		}
	case m.msg.Type == "progress" && m.msg.Snapshot != nil:
		latest[m.i] = *m.msg.Snapshot
		if w := m.msg.Snapshot.Window; w != nil {
			window.Merge(w)
		}
	case m.msg.Type == "connected":
		p.connected = true
	case m.msg.Type == "result":
		r, err := loadgen.ParseResult(m.msg.Result)
		if err != nil {
			p.errMsg = "bad result: " + err.Error()
		} else {
			p.result = r
		}
	case m.msg.Type == "error":
		p.errMsg = m.msg.Error
	}
}

func anyProgress(latest []loadgen.Snapshot) bool {
	for _, s := range latest {
		if s.Phase != "" {
			return true
		}
	}
	return false
}

func allReady(procs []*workerProc) bool {
	for _, p := range procs {
		if !p.connected && !p.done {
			return false
		}
	}
	return true
}

func readWorker(i int, r io.Reader, msgs chan<- indexedMsg) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 64<<20)
	for sc.Scan() {
		var m workerMsg
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			msgs <- indexedMsg{i: i, msg: workerMsg{Type: "error", Error: "bad message: " + err.Error()}}
			continue
		}
		msgs <- indexedMsg{i: i, msg: m}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	msgs <- indexedMsg{i: i, eof: err}
}

// runBound is the longest a worker run may take: its connect phase (pacing plus one connect timeout
// per round of DialConcurrency dials), the request phase, the drain, and a minute of slack.
func runBound(cfg loadgen.Config, n int) time.Duration {
	per := (cfg.Conns + n - 1) / n
	d := cfg.Duration + 2*cfg.Timeout + time.Minute
	if cfg.ConnectRate > 0 {
		d += time.Duration(float64(cfg.Conns) / cfg.ConnectRate * float64(time.Second))
	}
	conc := max(cfg.DialConcurrency, 1)
	ct := cfg.ConnectTimeout
	if ct <= 0 {
		ct = loadgen.DefaultConnectTimeout
	}
	return d + time.Duration((per+conc-1)/conc)*ct
}
