package e2e

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
type proc struct {
	name string
	cmd  *exec.Cmd

	mu     sync.Mutex
	stdout []string
	stderr []string

	done    chan struct{} // closed once the process has been reaped
	waitErr error         // set before done is closed
}

// startProc starts bin with args. The process is killed and reaped when the test ends;
// on failure its last log lines are printed.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	// If the test binary dies without running its cleanups (SIGPIPE, SIGKILL, panic in
	// another goroutine), the child must not outlive it.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	outR, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); p.scan(outR, &p.stdout) }()
	go func() { defer readers.Done(); p.scan(errR, &p.stderr) }()
	go func() {
		readers.Wait() // both pipes at EOF: the process has exited (Wait must come after the reads)
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		for _, l := range p.logLines() {
			if strings.Contains(l, "WARNING: DATA RACE") || strings.HasPrefix(l, "panic: ") {
				t.Errorf("%s: %s", p.name, l)
			}
		}
		if t.Failed() {
			p.dumpLogs(t, 40)
		}
	})
	return p
}

func (p *proc) scan(r io.Reader, dst *[]string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		*dst = append(*dst, sc.Text())
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, r)
}

// kill sends SIGKILL (if still running) and waits until the process is reaped.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// wait waits up to d for the process to exit and returns its exit code (-1 when killed
// by a signal), or fails the test.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v", p.name, d)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logLines returns a copy of the stderr lines so far.
func (p *proc) logLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.stderr...)
}

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

func (p *proc) stdoutLines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.stdout...)
}

func (p *proc) dumpLogs(t *testing.T, n int) {
	lines := p.logLines()
	for i, l := range lines {
		if strings.Contains(l, "WARNING: DATA RACE") || strings.HasPrefix(l, "panic: ") {
			lines = lines[i:] // the report is what matters
			n = max(n, 120)
			break
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("last %d stderr lines of %s:\n%s", len(lines), p.name, strings.Join(lines, "\n"))
}

// waitJSONLine polls the given stream (stdout or stderr) for a JSON object line that
// satisfies match, and returns it.
func (p *proc) waitJSONLine(t *testing.T, stdout bool, d time.Duration, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(d)
	seen := 0
	for {
		var lines []string
		if stdout {
			lines = p.stdoutLines()
		} else {
			lines = p.logLines()
		}
		for ; seen < len(lines); seen++ {
			var m map[string]any
			if json.Unmarshal([]byte(lines[seen]), &m) == nil && match(m) {
				return m
			}
		}
		if p.exited() {
			t.Fatalf("%s exited (%v) before logging %s", p.name, p.waitErr, what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not log %s within %v", p.name, what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
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
