package childproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes a child process.
type Spec struct {
	Name string
	Argv []string
	// Env is added to the parent's environment (nil: the parent's environment alone).
	Env []string
	// Group puts the child in its own process group, and Kill, Stop and Signal (and the end of
	// Start's ctx) reach the whole group. Without it they reach the child alone.
	Group bool
	// Keep is how many of the newest output lines are kept (0: all).
	Keep int
	// Log, if set, receives every output line as it is read (with a newline).
	Log io.Writer
	// OnLine, if set, is called with every output line from the reader goroutines.
	OnLine func(Line)
	// Stdin gives the Proc a pipe to the child's standard input (else it reads /dev/null).
	Stdin bool
}

// Line is one line of the child's output.
type Line struct {
	Stderr bool // else stdout
	Text   string
}

// Proc is a started child process.
type Proc struct {
	Name  string
	PID   int
	Stdin io.WriteCloser // with Spec.Stdin

	group bool
	cmd   *exec.Cmd
	keep  int

	mu      sync.Mutex
	lines   []Line
	dropped int           // lines no longer kept (the index of lines[0])
	grew    chan struct{} // closed and replaced when a line arrives

	done chan struct{} // closed once the process has exited, its pipes are drained and it is reaped
	err  error         // the Wait result, set before done is closed
}

// ErrExited is returned (wrapped) by WaitLine when the process ended first.
var ErrExited = errors.New("exited")

// Start starts the child. It dies with SIGKILL when the parent process dies unannounced, and is
// killed when ctx ends.
func Start(ctx context.Context, sp Spec) (*Proc, error) {
	cmd := exec.CommandContext(ctx, sp.Argv[0], sp.Argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: sp.Group, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 5 * time.Second
	if sp.Env != nil {
		cmd.Env = append(os.Environ(), sp.Env...)
	}
	p := &Proc{Name: sp.Name, group: sp.Group, cmd: cmd, keep: sp.Keep, grew: make(chan struct{}), done: make(chan struct{})}
	cmd.Cancel = func() error { return p.Signal(syscall.SIGKILL) }
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if sp.Stdin {
		if p.Stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", sp.Name, err)
	}
	p.PID = cmd.Process.Pid
	var logMu sync.Mutex
	read := func(r io.Reader, isStderr bool) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 64<<20)
		for sc.Scan() {
			l := Line{Stderr: isStderr, Text: sc.Text()}
			if sp.Log != nil {
				logMu.Lock()
				fmt.Fprintln(sp.Log, l.Text)
				logMu.Unlock()
			}
			if sp.OnLine != nil {
				sp.OnLine(l)
			}
			p.add(l)
		}
		_, _ = io.Copy(io.Discard, r) // a line over the limit: never block the child on its output
	}
	var readers sync.WaitGroup
	readers.Go(func() { read(stdout, false) })
	readers.Go(func() { read(stderr, true) })
	go func() {
		readers.Wait() // both pipes at EOF: Wait must come after the reads
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *Proc) add(l Line) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, l)
	if p.keep > 0 && len(p.lines) >= 2*p.keep {
		n := len(p.lines) - p.keep
		p.lines = append(p.lines[:0:0], p.lines[n:]...)
		p.dropped += n
	}
	close(p.grew)
	p.grew = make(chan struct{})
}

// Lines returns a copy of the kept lines of one stream.
func (p *Proc) Lines(stderr bool) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if l.Stderr == stderr {
			out = append(out, l.Text)
		}
	}
	return out
}

// WaitLine returns the first kept line, from the start, that match accepts, waiting for more
// output until ctx ends (its error) or the process has exited (an error wrapping ErrExited).
func (p *Proc) WaitLine(ctx context.Context, match func(Line) bool) (Line, error) {
	var seen int
	return p.WaitLineAfter(ctx, &seen, match)
}

// WaitLineAfter is WaitLine from the *seen-th line on (counted from the start, dropped lines
// included); *seen is left just past the lines it read, so successive calls read on.
func (p *Proc) WaitLineAfter(ctx context.Context, seen *int, match func(Line) bool) (Line, error) {
	for {
		exited := p.Exited() // before the scan: a process that has exited has no more lines
		p.mu.Lock()
		*seen = max(*seen, p.dropped)
		for *seen < p.dropped+len(p.lines) {
			l := p.lines[*seen-p.dropped]
			*seen++
			if match(l) {
				p.mu.Unlock()
				return l, nil
			}
		}
		grew := p.grew
		p.mu.Unlock()
		if exited {
			return Line{}, fmt.Errorf("%s %w (%v)", p.Name, ErrExited, p.err)
		}
		select {
		case <-grew:
		case <-p.done:
		case <-ctx.Done():
			return Line{}, ctx.Err()
		}
	}
}

// Failures returns the kept stderr lines that report a data race or a panic.
func (p *Proc) Failures() []string {
	var out []string
	for _, l := range p.Lines(true) {
		if isFailure(l) {
			out = append(out, l)
		}
	}
	return out
}

func isFailure(l string) bool {
	return strings.Contains(l, "WARNING: DATA RACE") || strings.HasPrefix(l, "panic: ")
}

// Tail returns the last n kept stderr lines, or from the first race or panic report on (at
// least 120 lines then): the report is what matters.
func (p *Proc) Tail(n int) []string {
	lines := p.Lines(true)
	for i, l := range lines {
		if isFailure(l) {
			lines, n = lines[i:], max(n, 120)
			break
		}
	}
	return lines[max(0, len(lines)-n):]
}

// Done is closed once the process has exited and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether Done is closed.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the exit error (nil for status 0); valid once Done is closed.
func (p *Proc) Err() error { return p.err }

// ExitCode is the exit status (-1 if killed by a signal); valid once Done is closed.
func (p *Proc) ExitCode() int { return p.cmd.ProcessState.ExitCode() }

// Wait waits for the exit and returns Err.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process (its group with Spec.Group).
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.group {
		return syscall.Kill(-p.cmd.Process.Pid, sig) // not p.PID: Cancel may run before Start sets it
	}
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL unless the process has exited, and waits for the exit.
func (p *Proc) Kill() {
	if !p.Exited() {
		_ = p.Signal(syscall.SIGKILL)
	}
	<-p.done
}

// Stop sends SIGTERM, waits up to grace for the exit, then kills.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.Kill()
	}
}
