package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stormgate/stormgate/internal/childproc"
)

// Binaries built once by TestMain.
var bins struct {
	sidecar    string
	stormbench string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse() // testing.Verbose below
	dir, err := os.MkdirTemp("", "stormgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go toolchain not found:", err)
		return 1
	}
	start := time.Now()
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if os.Getenv("STORMGATE_E2E_RACE") == "1" {
		// Race-instrumented binaries: slower (timing bounds may not hold), but any data
		// race in the sidecar under these scenarios fails the test that saw it.
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, "./cmd/sidecar", "./cmd/stormbench")...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the binaries failed:", err)
		return 1
	}
	bins.sidecar = filepath.Join(dir, "sidecar")
	bins.stormbench = filepath.Join(dir, "stormbench")
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "e2e: built sidecar and stormbench in %v\n", time.Since(start).Round(time.Millisecond))
	}
	return m.Run()
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// proc is a child process whose stdout and stderr lines are kept in memory.
type proc struct{ *childproc.Proc }

// startProc starts bin with args. The process is killed and reaped when the test ends; a data
// race or panic in its log fails the test, and on failure its last log lines are printed.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	cp, err := childproc.Start(context.Background(), childproc.Spec{Name: name, Argv: append([]string{bin}, args...)})
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cp}
	t.Cleanup(func() {
		p.Kill()
		for _, l := range p.Failures() {
			t.Errorf("%s: %s", p.Name, l)
		}
		if t.Failed() {
			p.dumpLogs(t, 40)
		}
	})
	return p
}

// wait waits up to d for the process to exit and returns its exit code (-1 when killed
// by a signal), or fails the test.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.Name, d)
	}
	return p.ExitCode()
}

// logLines returns a copy of the stderr lines so far.
func (p *proc) logLines() []string { return p.Lines(true) }

// jsonLines returns the process's JSON log lines (stderr) whose msg is msg.
func (p *proc) jsonLines(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range p.logLines() {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (p *proc) stdoutLines() []string { return p.Lines(false) }

func (p *proc) dumpLogs(t *testing.T, n int) {
	lines := p.Tail(n)
	t.Logf("last %d stderr lines of %s:\n%s", len(lines), p.Name, strings.Join(lines, "\n"))
}

// waitJSONLine waits for a JSON object line on the given stream (stdout or stderr) that
// satisfies match, and returns it.
func (p *proc) waitJSONLine(t *testing.T, stdout bool, d time.Duration, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var m map[string]any
	_, err := p.WaitLine(ctx, func(l childproc.Line) bool {
		m = nil
		return l.Stderr != stdout && json.Unmarshal([]byte(l.Text), &m) == nil && match(m)
	})
	switch {
	case errors.Is(err, childproc.ErrExited):
		t.Fatalf("%s exited (%v) before logging %s", p.Name, p.Err(), what)
	case err != nil:
		t.Fatalf("%s did not log %s within %v", p.Name, what, d)
	}
	return m
}

// poll calls cond every few milliseconds until it returns true or d passes.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
