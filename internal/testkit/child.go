package testkit

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Child is this test binary run again as a child process, to serve a role its TestMain recognises
// (the handover tests' old image, which execs itself into the new one). The test reads its standard
// output line by line with Next, on one goroutine; its standard error is the test's.
type Child struct {
	t     testing.TB
	cmd   *exec.Cmd
	lines *bufio.Scanner
}

// StartChild starts the test binary with env added to this process's environment and no test to run
// (-test.run=^$): its TestMain serves the role env names instead. The test's cleanup kills it.
func StartChild(t testing.TB, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &Child{t: t, cmd: cmd, lines: bufio.NewScanner(out)}
}

// Next is the rest of the child's next output line that begins with prefix, the lines before it passed
// over; t fails if the output ends first.
func (c *Child) Next(prefix string) string {
	for c.lines.Scan() {
		if l := c.lines.Text(); strings.HasPrefix(l, prefix) {
			return strings.TrimPrefix(l, prefix)
		}
	}
	c.t.Fatalf("child: no %q line", prefix)
	return ""
}

// Signal sends sig to the child.
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }
