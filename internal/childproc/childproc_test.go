package childproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func TestWaitLineAndStop(t *testing.T) {
	var log strings.Builder
	// 30 stdout lines, a race report on stderr, then wait for SIGTERM (the shell's trap exits 3).
	script := `trap 'exit 3' TERM; for i in $(seq 1 30); do echo "line $i"; done; echo "WARNING: DATA RACE" >&2; echo ready >&2; while :; do sleep 0.05; done`
	p, err := Start(context.Background(), Spec{Name: "sh", Argv: []string{"sh", "-c", script}, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := p.WaitLine(ctx, func(l Line) bool { return l.Stderr && l.Text == "ready" })
	if err != nil || l.Text != "ready" {
		t.Fatalf("WaitLine: %+v, %v", l, err)
	}
	if _, err := p.WaitLine(ctx, func(l Line) bool { return l.Text == "line 30" }); err != nil { // stdout and stderr are separate pipes
		t.Fatal(err)
	}
	if got := p.Lines(false); len(got) != 30 {
		t.Errorf("kept %d stdout lines, want 30", len(got))
	}
	if got := p.Failures(); len(got) != 1 || got[0] != "WARNING: DATA RACE" {
		t.Errorf("Failures() = %q", got)
	}
	if got := p.Tail(1); len(got) != 2 || got[0] != "WARNING: DATA RACE" {
		t.Errorf("Tail(1) = %q: want the race report on", got)
	}
	p.Stop(10 * time.Second)
	if p.ExitCode() != 3 {
		t.Errorf("exit code %d after SIGTERM, want 3 (the trap ran)", p.ExitCode())
	}
	if _, err := p.WaitLine(ctx, func(Line) bool { return false }); !errors.Is(err, ErrExited) {
		t.Errorf("WaitLine after the exit: %v, want ErrExited", err)
	}
	if !strings.Contains(log.String(), "line 1\n") || !strings.Contains(log.String(), "ready\n") {
		t.Errorf("log misses lines:\n%s", log.String())
	}
}

func TestGroupKillReachesGrandchildren(t *testing.T) {
	p, err := Start(context.Background(), Spec{Name: "sh", Group: true,
		Argv: []string{"sh", "-c", `sleep 60 & echo "$!"; wait`}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := p.WaitLine(ctx, func(l Line) bool { return !l.Stderr })
	if err != nil {
		t.Fatal(err)
	}
	var child int
	fmt.Sscan(l.Text, &child)
	p.Kill() // returns once the pipes are at EOF: the sleep, which holds them too, is exiting
	// Dead soon: gone, or a zombie until init reaps it (it closes its files before it is a zombie).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil || strings.Contains(string(st), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still alive 10s after Kill: %s", child, st)
		}
	}
}

func TestKeep(t *testing.T) {
	p, err := Start(context.Background(), Spec{Name: "seq", Argv: []string{"seq", "1", "100"}, Keep: 8})
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Wait()
	if got := p.Lines(false); len(got) < 8 || len(got) > 16 || got[len(got)-1] != "100" {
		t.Errorf("kept lines %q: want 8 to 16 (Keep 8, trimmed at twice that), ending with 100", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.WaitLine(ctx, func(l Line) bool { return l.Text == "1" }); !errors.Is(err, ErrExited) {
		t.Errorf("WaitLine for a dropped line: %v, want ErrExited", err)
	}
}

func TestContextEndKills(t *testing.T) {
	for _, group := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		p, err := Start(ctx, Spec{Name: "sleep", Argv: []string{"sleep", "30"}, Group: group})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("group %v: still running 10s after its context ended", group)
			p.Kill()
		}
		cancel()
	}
}

func TestStdinAndWaitLineAfter(t *testing.T) {
	p, err := Start(context.Background(), Spec{Name: "cat", Argv: []string{"cat"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var seen int
	for _, want := range []string{"a 1", "b", "a 2"} {
		if _, err := io.WriteString(p.Stdin, want+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a 1", "a 2"} { // each call reads on from the last
		l, err := p.WaitLineAfter(ctx, &seen, func(l Line) bool { return strings.HasPrefix(l.Text, "a ") })
		if err != nil || l.Text != want {
			t.Fatalf("WaitLineAfter = %q, %v; want %q", l.Text, err, want)
		}
	}
	p.Stdin.Close() // cat exits at EOF
	if err := p.Wait(); err != nil {
		t.Errorf("cat: %v", err)
	}
}
