package transparent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs one iptables command. Install and Clean talk to iptables only through it, so tests can
// check the exact commands without root and callers can pick the binary (iptables, iptables-legacy,
// ip6tables) or wrap it (ip netns exec NAME iptables).
type Runner interface {
	// Run runs iptables with args (everything after the program name) and returns its standard output.
	// A command that ran and exited non-zero must return an *ExitError; any other error means it did
	// not run.
	Run(ctx context.Context, args ...string) (stdout []byte, err error)
}

// ExitError is a command that ran and exited with a non-zero status.
type ExitError struct {
	Argv   []string // the whole command line that ran
	Code   int      // exit status; iptables uses 1 for "no such rule/chain"
	Stderr string   // what it printed on standard error, trimmed
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s: exit status %d", FormatCommand(e.Argv), e.Code)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// ExecRunner runs a real program.
type ExecRunner struct {
	// Argv is the program and any arguments that come before the iptables arguments, e.g.
	// {"iptables"}, {"ip6tables"} or {"ip", "netns", "exec", "pod", "iptables"}. Empty means {"iptables"}.
	Argv []string
}

var _ Runner = ExecRunner{}

// Program returns the command prefix Run uses.
func (r ExecRunner) Program() []string {
	if len(r.Argv) == 0 {
		return []string{"iptables"}
	}
	return r.Argv
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, args ...string) ([]byte, error) {
	argv := append(append([]string(nil), r.Program()...), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return stdout.Bytes(), &ExitError{Argv: argv, Code: ee.ExitCode(), Stderr: strings.TrimSpace(stderr.String())}
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %w", FormatCommand(argv), err)
	}
	return stdout.Bytes(), nil
}
