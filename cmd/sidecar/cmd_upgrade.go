package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

type upgradeFlags struct {
	binary           string
	admin            string
	timeout          time.Duration
	preflightTimeout time.Duration
}

func newUpgradeCmd() *cobra.Command {
	var f upgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade [--binary PATH] [--admin 127.0.0.1:15000]",
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
             kernel), the data plane stops at frame boundaries
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
waiting for the outcome (see its log and GET /upgrade on the admin listener).`,
		Example: `  # systemd (ExecReload=): the package manager replaced /usr/bin/sidecar
  sidecar upgrade --binary /usr/bin/sidecar

  # Kubernetes: the new binary copied into a volume both containers see
  kubectl cp sidecar-v1.4.0 shop/orders-7d9f:/stormgate-bin/sidecar -c stormgate
  kubectl exec -n shop orders-7d9f -c stormgate -- sidecar upgrade --binary /stormgate-bin/sidecar`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUpgrade(cmd.OutOrStdout(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.binary, "binary", "", "the new sidecar binary, as the running sidecar sees the file system (default: its --upgrade-binary, or the path it was started from)")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:15000", "admin listener of the running sidecar")
	fl.DurationVar(&f.timeout, "timeout", time.Minute, "how long to wait for the outcome")
	fl.DurationVar(&f.preflightTimeout, "preflight-timeout", defaultPreflightTimeout, "how long the new binary's preflight may take")
	return cmd
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
