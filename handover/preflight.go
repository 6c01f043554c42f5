package handover

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// PreflightFlag is added to the old process's command line to run the new binary's checks:
// parse flags and settings, build the logger, validate, print a PreflightReport, exit 0;
// bind nothing, dial nothing.
const PreflightFlag = "--preflight"

// PreflightReport is the one JSON line a binary prints on stdout when its preflight passes.
type PreflightReport struct {
	Preflight string `json:"preflight"` // "ok"
	Version   string `json:"version"`
	Format    int    `json:"handover_format"`
	// Carries is what the binary can take over besides Dubbo connections (format 1 has always
	// had those), in optional parts of the format: CarriesHTTP2. Binaries before it report none.
	Carries []string `json:"carries,omitempty"`
}

// What a binary can carry (PreflightReport.Carries).
const (
	// CarriesHTTP2: the binary restores HTTP/2 (Triple, gRPC) consumer connections from a handover.
	CarriesHTTP2 = "http2"
	// CarriesCompactConsumers: the binary reads the data plane's consumers as one compact blob
	// (proxy.Snapshot.SetCompact), which decodes in a tenth of the JSON's time.
	CarriesCompactConsumers = "compact-consumers"
)

// Can reports whether the binary carries what.
func (r PreflightReport) Can(what string) bool { return slices.Contains(r.Carries, what) }

// Preflight runs binary with args (the old process's command line, PreflightFlag added by
// the caller) and stdin, and returns its report. It refuses, with what the binary said, a
// binary that cannot be started, exits non-zero, prints no report, does not finish within
// timeout (it is killed, with whatever it started), or writes another state format than
// this binary reads: the handover would fail after the freeze.
func Preflight(ctx context.Context, binary string, args []string, stdin []byte, timeout time.Duration) (PreflightReport, error) {
	var rep PreflightReport
	st, err := os.Stat(binary)
	switch {
	case err != nil:
		return rep, fmt.Errorf("%s: %w", binary, err)
	case !st.Mode().IsRegular():
		return rep, fmt.Errorf("%s is not a regular file", binary)
	case st.Mode().Perm()&0o111 == 0:
		return rep, fmt.Errorf("%s is not executable (chmod +x)", binary)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command(binary, args...)
	cmd.Env = Env()
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut capped
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// Its own process group: on timeout the whole group is killed, and as PID 1 (in a
	// container) this process reaps what the binary left behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return rep, fmt.Errorf("cannot start %s: %w", binary, err)
	}
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		_ = unix.Kill(-pgid, unix.SIGKILL)
		<-waited
		reapGroup(pgid)
		return rep, fmt.Errorf("%s did not finish its preflight within %v (killed)%s", binary, timeout, tail(&errOut))
	}
	reapGroup(pgid)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return rep, fmt.Errorf("%s failed its preflight (%s)%s", binary, ee.ProcessState, tail(&errOut))
		}
		return rep, fmt.Errorf("%s: %w", binary, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r PreflightReport
		if json.Unmarshal([]byte(line), &r) == nil && r.Preflight == "ok" {
			rep = r
		}
	}
	if rep.Preflight != "ok" {
		return rep, fmt.Errorf("%s exited 0 without a preflight report: is it a Stormgate sidecar binary? (stdout: %q)",
			binary, strings.TrimSpace(out.String()))
	}
	if rep.Format != Format {
		return rep, fmt.Errorf("%s (version %s) reads handover state format %d, this binary writes format %d: "+
			"upgrade through a version that reads both, or restart", binary, rep.Version, rep.Format, Format)
	}
	return rep, nil
}

// reapGroup reaps, without waiting, whatever of process group pgid became this process's
// child (orphans are re-parented to PID 1, which may be this process).
func reapGroup(pgid int) {
	for range 64 {
		var ws unix.WaitStatus
		if pid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil); pid <= 0 || err != nil {
			return
		}
	}
}

// tail formats the last lines a failed binary wrote on stderr, for the refusal.
func tail(b *capped) string {
	s := strings.TrimSpace(b.String())
	if s == "" {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return ": " + strings.Join(lines, " | ")
}

// capped keeps the last 16 KiB written to it.
type capped struct{ b []byte }

const capBytes = 16 << 10

func (c *capped) Write(p []byte) (int, error) {
	c.b = append(c.b, p...)
	if len(c.b) > capBytes {
		c.b = append(c.b[:0], c.b[len(c.b)-capBytes:]...)
	}
	return len(p), nil
}

func (c *capped) String() string { return string(c.b) }
