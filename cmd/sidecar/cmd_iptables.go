package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/transparent"
)

// Backends of `sidecar iptables`.
const (
	backendNFT      = "nftables"
	backendIptables = "iptables"
)

type iptablesFlags struct {
	inbound   []string
	proxyPort uint16
	chain     string
	program   string
	program6  string
	backend   string
	ipv6      bool
	clean     bool
	dryRun    bool
}

func newIptablesCmd() *cobra.Command {
	var f iptablesFlags
	cmd := &cobra.Command{
		Use:   "iptables --inbound-ports PORT[,PORT...] --proxy-port PORT [--clean] [--dry-run]",
		Short: "Install (or remove) the rules that steer inbound Dubbo traffic through Stormgate",
		Long: `Installs, in the current network namespace, the rules that REDIRECT inbound TCP connections
for each --inbound-ports port to --proxy-port, where 'sidecar run --transparent' listens. This is
what the injected init container runs; it needs root and CAP_NET_ADMIN in the pod's network
namespace, nothing else.

Backends (--backend):
  nftables  (default) programs the kernel directly over netlink: no iptables or nft program, so
            the init container is the same empty image as the sidecar. One table, 'inet stormgate'
            (IPv4 and IPv6 at once), with a nat chain on the prerouting hook:
              table inet stormgate {
                chain inbound {
                  type nat hook prerouting priority dstnat; policy accept;
                  tcp dport 20880 redirect to :15006
                }
              }
            Re-running it changes nothing; other ports replace the table in one transaction.
            --clean deletes the table and nothing else.
  iptables  runs the iptables program (and ip6tables) found on PATH: a nat chain STORMGATE_INBOUND
            jumped to from PREROUTING. For nodes whose kernel lacks nf_tables; the image then needs
            the iptables programs, so it is not the default. --clean removes the jump and the chain.

IPv6 (--ipv6) is on when the namespace has IPv6 (/proc/sys/net/ipv6 exists), so dual-stack pods
are covered; --ipv6=false installs IPv4 rules only (nftables: table 'ip stormgate').

Only the prerouting hook is used, so traffic the pod makes itself (Stormgate dialing the provider
on 127.0.0.1:<port>) is never redirected. Afterwards the installed rules are printed, so
'kubectl logs POD -c stormgate-init' shows them. --dry-run prints exactly what would be installed
(nftables: input for 'nft -f'; iptables: the commands) and changes nothing.`,
		Example: `  sidecar iptables --inbound-ports 20880 --proxy-port 15006
  sidecar iptables --inbound-ports 20880,20881 --proxy-port 15006 --dry-run
  sidecar iptables --clean
  sidecar iptables --inbound-ports 20880 --backend iptables --iptables iptables-legacy`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("ipv6") {
				f.ipv6 = hostHasIPv6()
			}
			return runIptables(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.inbound, "inbound-ports", nil, "provider ports to redirect, comma separated (e.g. 20880,20881); required unless --clean")
	fl.Uint16Var(&f.proxyPort, "proxy-port", 15006, "port of Stormgate's transparent listener (sidecar run --transparent)")
	fl.StringVar(&f.backend, "backend", backendNFT, "nftables (netlink, no programs needed) or iptables (runs the iptables programs)")
	fl.BoolVar(&f.ipv6, "ipv6", true, "also redirect IPv6 (default: on when the namespace has IPv6)")
	fl.BoolVar(&f.clean, "clean", false, "remove everything Stormgate installed instead of installing")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print what would be installed (or removed) and change nothing")
	fl.StringVar(&f.chain, "chain", transparent.DefaultChain, "iptables backend: nat chain Stormgate owns")
	fl.StringVar(&f.program, "iptables", "iptables", "iptables backend: program to run (e.g. iptables-nft, iptables-legacy)")
	fl.StringVar(&f.program6, "ip6tables", "ip6tables", "iptables backend: IPv6 program to run")
	return cmd
}

// hostHasIPv6 reports whether this network namespace has an IPv6 stack (absent on kernels booted
// with ipv6.disable=1).
func hostHasIPv6() bool {
	_, err := os.Stat("/proc/sys/net/ipv6")
	return err == nil
}

func runIptables(ctx context.Context, out io.Writer, f iptablesFlags) error {
	ports, err := transparent.ParsePorts(strings.Join(f.inbound, ","))
	if err != nil {
		return fmt.Errorf("--inbound-ports: %w", err)
	}
	rules := transparent.Rules{Chain: f.chain, InboundPorts: ports, ProxyPort: f.proxyPort}
	if f.clean {
		if err := transparent.ValidateChain(rules.ChainName()); err != nil {
			return err
		}
	} else if err := rules.Validate(); err != nil {
		return fmt.Errorf("%w (see sidecar iptables --help)", err)
	}
	switch f.backend {
	case backendNFT:
		return runNFT(out, transparent.NFT{IPv4Only: !f.ipv6}, rules, f)
	case backendIptables:
		programs := []string{f.program}
		if f.ipv6 {
			programs = append(programs, f.program6)
		}
		for _, prog := range programs {
			if err := runIptablesProgram(ctx, out, prog, rules, f); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("--backend %q: must be %s or %s", f.backend, backendNFT, backendIptables)
}

func runNFT(out io.Writer, n transparent.NFT, rules transparent.Rules, f iptablesFlags) error {
	if f.dryRun {
		if f.clean {
			fmt.Fprint(out, "# removes whichever of these tables exist\ndelete table inet "+transparent.NFTTable+
				"\ndelete table ip "+transparent.NFTTable+"\n")
			return nil
		}
		fmt.Fprint(out, n.Script(rules))
		return nil
	}
	var changed bool
	var err error
	if f.clean {
		changed, err = n.Clean()
	} else {
		changed, err = n.Install(rules)
	}
	if err != nil {
		return err
	}
	stack := "IPv4 and IPv6"
	if n.IPv4Only {
		stack = "IPv4 only"
	}
	where := fmt.Sprintf("table %s %s, %s", n.Family(), transparent.NFTTable, stack)
	if f.clean {
		where = "table " + transparent.NFTTable
	}
	fmt.Fprintf(out, "nftables: %s\n", ruleSummary(rules, f.clean, changed, where))
	listing, err := n.List()
	if err != nil {
		return err
	}
	fmt.Fprint(out, listing)
	return nil
}

func runIptablesProgram(ctx context.Context, out io.Writer, prog string, rules transparent.Rules, f iptablesFlags) error {
	if f.dryRun {
		for _, line := range rules.DryRun(prog, f.clean) {
			fmt.Fprintln(out, line)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run := transparent.ExecRunner{Argv: strings.Fields(prog)}
	var changed bool
	var err error
	if f.clean {
		changed, err = transparent.Clean(ctx, run, rules.ChainName())
	} else {
		changed, err = transparent.Install(ctx, run, rules)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s\n", prog, ruleSummary(rules, f.clean, changed, "chain "+rules.ChainName()))
	table, err := run.Run(ctx, "-t", "nat", "-S")
	if err != nil {
		return fmt.Errorf("list nat table: %w", err)
	}
	_, err = out.Write(table)
	return err
}

func ruleSummary(r transparent.Rules, clean, changed bool, where string) string {
	switch {
	case clean && changed:
		return "removed " + where
	case clean:
		return "nothing to remove (no " + where + ")"
	}
	ports := make([]string, 0, len(r.Ports()))
	for _, p := range r.Ports() {
		ports = append(ports, strconv.Itoa(int(p)))
	}
	state := "already in place"
	if changed {
		state = "installed"
	}
	return fmt.Sprintf("rules %s: tcp ports %s -> %d (%s)", state, strings.Join(ports, ","), r.ProxyPort, where)
}
