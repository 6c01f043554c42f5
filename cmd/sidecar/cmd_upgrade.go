package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

type upgradeFlags struct {
	binary           string
	into             string
	sha256           string
	admin            string
	timeout          time.Duration
	preflightTimeout time.Duration
	endStreams       bool
}

func newUpgradeCmd() *cobra.Command {
	var f upgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade [--binary PATH|-] [--admin 127.0.0.1:15000]",
		Short: "Hand every connection of the running sidecar to a new binary, without closing one",
		Long: `Upgrade the sidecar that serves on --admin to the binary at --binary, in place: same PID
(PID 1 in a container, systemd's MainPID), same command line, and every consumer
connection, provider connection, request in flight and held request carried over.

What happens (each phase is logged by the sidecar, with its duration):
  preflight  the sidecar runs the new binary with its own command line and --preflight:
             flags, settings file, the settings in force and the state format are checked,
             nothing is bound. A binary that fails, or takes longer than --preflight-timeout,
             is refused: nothing was stopped, and this command says why.
  freeze     accepting stops (the listening socket stays open: new connections queue in the
             kernel), the data plane stops at frame boundaries. Triple/gRPC calls already
             on provider streams get 1 s to end; calls still open then (long streams) fail
             the upgrade safely, or with --end-streams are ended with grpc-status 14
             UNAVAILABLE while their connections are handed over
  exec       the sidecar re-executes itself as the new binary, with its sockets and state
  restore    the new binary takes everything over and serves; consumers saw a pause
             (docs/benchmarks.md: about a tenth of a second with 10,000 connections)
  rollback   a new binary that cannot restore execs the old one again, which restores the
             same state and serves on; this command reports the reason

This command exits 0 only when the new binary serves; it prints the version before and
after and how long consumers waited. In-flight requests to the metrics and admin
listeners may be cut during the exec; this command retries its own.

Without --binary, the sidecar upgrades to its run --upgrade-binary, or to the path it was
started from (replace the file first). SIGUSR2 to the sidecar does the same without
waiting for the outcome (see its log and GET /upgrade on the admin listener).

--binary - reads the new binary from standard input into --into (default /stormgate-bin,
the writable volume sidecar inject mounts in the Stormgate container), as the file
'sidecar', and upgrades to it: on Kubernetes one 'kubectl exec -i' does everything,
with no shell, tar or kubectl cp (the image has none). --sha256 checks what arrived
against the release's SHA256SUMS first. In the image the binary is /sidecar.`,
		Example: `  # systemd (ExecReload=): the package manager replaced /usr/bin/sidecar
  sidecar upgrade --binary /usr/bin/sidecar

  # Kubernetes: stream the new binary (a release's sidecar-dataplane, same architecture)
  # into the pod and hand over to it; -i, not -t
  kubectl exec -i -n shop orders-7d9f -c stormgate -- /sidecar upgrade --binary - \
      --sha256 "$(grep ' sidecar-dataplane-0.2.0-linux-amd64$' SHA256SUMS | cut -d' ' -f1)" \
      < sidecar-dataplane-0.2.0-linux-amd64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.binary == "-" {
				path, n, sum, err := receiveBinary(cmd.InOrStdin(), f.into, f.sha256)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "received %d bytes (sha256 %s) into %s\n", n, sum, path)
				f.binary = path
			} else if f.sha256 != "" {
				return errors.New("--sha256 checks a binary read from standard input: use it with --binary -")
			}
			return runUpgrade(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.binary, "binary", "", "the new sidecar binary, as the running sidecar sees the file system (default: its --upgrade-binary, or the path it was started from); - reads it from standard input into --into")
	fl.StringVar(&f.into, "into", uploadDir, "with --binary -: the directory the binary is written to (as DIR/sidecar), one the running sidecar can read")
	fl.StringVar(&f.sha256, "sha256", "", "with --binary -: the SHA-256 the binary must have (hex, as in a release's SHA256SUMS)")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:15000", "admin listener of the running sidecar")
	fl.DurationVar(&f.timeout, "timeout", time.Minute, "how long to wait for the outcome")
	fl.DurationVar(&f.preflightTimeout, "preflight-timeout", defaultPreflightTimeout, "how long the new binary's preflight may take")
	fl.BoolVar(&f.endStreams, "end-streams", false, "Triple/gRPC: end the calls still open after the freeze's 1 s wait (long streams) with grpc-status 14 UNAVAILABLE, their consumer connections handed over, instead of failing the upgrade; a unary call still running then ends the same way and may have run")
	return cmd
}

// uploadDir is where `upgrade --binary -` writes the binary by default: the writable emptyDir that
// `sidecar inject` mounts in the Stormgate container (inject.UpgradeDir; a test keeps them equal).
const uploadDir = "/stormgate-bin"

// maxUpload bounds a binary read from standard input (the injected volume holds 128 MiB).
const maxUpload = 128 << 20

// receiveBinary writes the binary r carries into dir/sidecar, atomically (a temporary file, synced,
// renamed over any earlier one: a running binary keeps its inode) and mode 0755, after checking that
// something arrived, that it is an ELF executable, and, when wantSum is set, its SHA-256. It returns
// the path, the size and the SHA-256.
func receiveBinary(r io.Reader, dir, wantSum string) (string, int64, string, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return "", 0, "", fmt.Errorf("--into %s: not a directory (%v): in a pod it is the stormgate-bin volume that sidecar inject mounts "+
			"(pods injected by a release before it: inject them again); elsewhere, a directory the running sidecar can read", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".sidecar-upload-*")
	if err != nil {
		return "", 0, "", fmt.Errorf("--into %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, maxUpload+1))
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	sum := hex.EncodeToString(h.Sum(nil))
	switch {
	case err != nil:
		return "", n, sum, fmt.Errorf("reading the binary from standard input into %s: %w", dir, err)
	case n == 0:
		return "", 0, sum, errors.New("--binary -: nothing on standard input: pipe the binary in (kubectl exec -i, not -t: ... -- /sidecar upgrade --binary - < FILE)")
	case n > maxUpload:
		return "", n, sum, fmt.Errorf("--binary -: more than %d MiB on standard input: not a sidecar binary", maxUpload>>20)
	case wantSum != "" && !strings.EqualFold(strings.TrimSpace(wantSum), sum):
		return "", n, sum, fmt.Errorf("--sha256: the %d bytes received have sha256 %s, not %s: a truncated or wrong file; nothing was changed", n, sum, wantSum)
	}
	if magic, err := readMagic(tmp.Name()); err != nil || magic != "\x7fELF" {
		return "", n, sum, fmt.Errorf("--binary -: what arrived (%d bytes, starting %q) is not a Linux executable", n, magic)
	}
	path := filepath.Join(dir, "sidecar")
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", n, sum, err
	}
	return path, n, sum, nil
}

func readMagic(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b := make([]byte, 4)
	k, err := io.ReadFull(f, b)
	return string(b[:k]), err
}

// runUpgrade asks the sidecar to upgrade (POST /upgrade) and follows GET /upgrade, across
// the exec, until the outcome of this upgrade is known.
func runUpgrade(out io.Writer, f upgradeFlags) error {
	binary := f.binary
	if binary != "" && !filepath.IsAbs(binary) {
		abs, err := filepath.Abs(binary)
		if err != nil {
			return err
		}
		binary = abs
	}
	// A fresh connection per request: the exec closes the sidecar's side of every one.
	hc := &http.Client{Timeout: f.preflightTimeout + 10*time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	base := "http://" + f.admin
	before, err := getUpgradeStatus(hc, base)
	if err != nil {
		return fmt.Errorf("no sidecar answers on --admin %s: %w", f.admin, err)
	}
	q := url.Values{"preflight_timeout": {f.preflightTimeout.String()}}
	if binary != "" {
		q.Set("binary", binary)
	}
	if f.endStreams {
		q.Set("end_streams", "true")
	}
	resp, err := hc.Post(base+"/upgrade?"+q.Encode(), "", nil)
	if err != nil {
		return fmt.Errorf("POST /upgrade: %w", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("upgrade refused; still running %s (pid %d): %s", before.Version, before.PID, e.Error)
		}
		return fmt.Errorf("upgrade refused: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var job upgradeOutcome
	if err := json.Unmarshal(body, &job); err != nil {
		return fmt.Errorf("POST /upgrade: %w", err)
	}
	fmt.Fprintf(out, "preflight passed: %s is version %s; handing over (upgrade %s, pid %d)\n", job.Binary, job.To, job.ID, before.PID)

	deadline := time.Now().Add(f.timeout)
	hc.Timeout = 2 * time.Second
	var lastErr error
	for time.Now().Before(deadline) {
		st, err := getUpgradeStatus(hc, base)
		switch {
		case err != nil:
			lastErr = err // expected for a moment: the exec
		case st.PID != before.PID:
			// The exec keeps the pid (and a rollback too): another pid is a new process, started
			// by systemd or the kubelet after the upgraded one died.
			return fmt.Errorf("upgrade %s failed: the sidecar now answering on %s is a new process (pid %d, was %d; version %s): "+
				"the upgraded process died before it had restored what it was handed, and its consumer connections "+
				"were closed; see the log of the process that died (docs/operations.md)", job.ID, f.admin, st.PID, before.PID, st.Version)
		case st.Last != nil && st.Last.ID == job.ID && st.Last.Result != "":
			return reportOutcome(out, before, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no outcome for upgrade %s within %v (last error: %v): see the sidecar's log; "+
		"a new binary that crashed before it could restore takes the connections with it (docs/operations.md)",
		job.ID, f.timeout, lastErr)
}

func reportOutcome(out io.Writer, before upgradeStatus, st upgradeStatus) error {
	o := st.Last
	if o.Result != resultSuccess {
		return fmt.Errorf("upgrade %s: %s: %s; running %s (pid %d)", o.ID, strings.ReplaceAll(o.Result, "_", " "), o.Reason, st.Version, st.PID)
	}
	fmt.Fprintf(out, "upgraded: %s -> %s, pid %d; consumers waited %s (freeze %s, exec %s, restore %s); handed over %d consumer, %d upstream and %d pending connections\n",
		o.From, st.Version, st.PID, o.Phases["total"], o.Phases["freeze"], o.Phases["exec"], o.Phases["restore"],
		o.Handed["consumers"], o.Handed["upstream"], o.Handed["pending"])
	return nil
}

func getUpgradeStatus(hc *http.Client, base string) (upgradeStatus, error) {
	var st upgradeStatus
	resp, err := hc.Get(base + "/upgrade")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /upgrade: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("GET /upgrade: %w", err)
	}
	if st.Version == "" {
		return st, errors.New("GET /upgrade: not a Stormgate sidecar")
	}
	return st, nil
}
