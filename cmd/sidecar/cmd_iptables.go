package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stormgate/stormgate/transparent"
)

func newIptablesCmd() *cobra.Command {
	var (
		inbound   []string
		proxyPort uint16
		chain     string
		program   string
		program6  string
		ipv6      bool
		clean     bool
		dryRun    bool
	)
	cmd := &cobra.Command{
		Use:   "iptables --inbound-ports PORT[,PORT...] --proxy-port PORT [--clean] [--dry-run]",
		Short: "Install (or remove) the iptables rules that steer inbound Dubbo traffic through Stormgate",
		Long: `Installs, in the nat table of the current network namespace, a chain (STORMGATE_INBOUND) that
REDIRECTs inbound TCP connections for each --inbound-ports port to --proxy-port, where
'sidecar run --transparent' listens, and a jump to it from PREROUTING. This is what the injected
init container runs; it needs CAP_NET_ADMIN (and root) in the pod's network namespace.

Only PREROUTING is touched, so traffic the pod makes itself (Stormgate dialing the provider on
127.0.0.1:<port>) is never redirected. Running it again changes nothing; running it with other
ports replaces the chain's rules. --clean removes the jump and the chain and nothing else.
The current nat table is printed afterwards (iptables -t nat -S).

The iptables binary is run as found on PATH (--iptables to pick another, e.g. iptables-legacy).
With the nft backend CAP_NET_ADMIN alone is enough; the legacy backend also needs CAP_NET_RAW.`,
		Example: `  sidecar iptables --inbound-ports 20880 --proxy-port 15006
  sidecar iptables --inbound-ports 20880,20881 --proxy-port 15006 --dry-run
  sidecar iptables --clean
  sidecar iptables --inbound-ports 20880 --ipv6            # also ip6tables`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ports, err := transparent.ParsePorts(strings.Join(inbound, ","))
			if err != nil {
				return err
			}
			rules := transparent.Rules{Chain: chain, InboundPorts: ports, ProxyPort: proxyPort}
			if clean {
				if err := transparent.ValidateChain(rules.ChainName()); err != nil {
					return err
				}
			} else if err := rules.Validate(); err != nil {
				return fmt.Errorf("%w (see sidecar iptables --help)", err)
			}
			programs := []string{program}
			if ipv6 {
				programs = append(programs, program6)
			}
			out := cmd.OutOrStdout()
			for _, prog := range programs {
				if dryRun {
					for _, line := range rules.DryRun(prog, clean) {
						fmt.Fprintln(out, line)
					}
					continue
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
				run := transparent.ExecRunner{Argv: strings.Fields(prog)}
				var changed bool
				if clean {
					changed, err = transparent.Clean(ctx, run, rules.ChainName())
				} else {
					changed, err = transparent.Install(ctx, run, rules)
				}
				if err != nil {
					cancel()
					return err
				}
				fmt.Fprintf(out, "%s: %s\n", prog, iptablesSummary(rules, clean, changed))
				table, err := run.Run(ctx, "-t", "nat", "-S")
				cancel()
				if err != nil {
					return fmt.Errorf("list nat table: %w", err)
				}
				out.Write(table)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&inbound, "inbound-ports", nil, "provider ports to redirect, comma separated (e.g. 20880,20881); required unless --clean")
	f.Uint16Var(&proxyPort, "proxy-port", 15006, "port of Stormgate's transparent listener (sidecar run --transparent)")
	f.StringVar(&chain, "chain", transparent.DefaultChain, "nat chain Stormgate owns")
	f.BoolVar(&clean, "clean", false, "remove the PREROUTING jump and the chain instead of installing")
	f.BoolVar(&dryRun, "dry-run", false, "print the iptables commands instead of running them")
	f.StringVar(&program, "iptables", "iptables", "iptables program to run (e.g. iptables-nft, iptables-legacy)")
	f.BoolVar(&ipv6, "ipv6", false, "apply the same rules to IPv6 too (with --ip6tables)")
	f.StringVar(&program6, "ip6tables", "ip6tables", "ip6tables program to run with --ipv6")
	return cmd
}

func iptablesSummary(r transparent.Rules, clean, changed bool) string {
	switch {
	case clean && changed:
		return "removed chain " + r.ChainName() + " and its PREROUTING jump"
	case clean:
		return "nothing to remove (no chain " + r.ChainName() + ")"
	}
	ports := make([]string, 0, len(r.Ports()))
	for _, p := range r.Ports() {
		ports = append(ports, strconv.Itoa(int(p)))
	}
	state := "already in place"
	if changed {
		state = "installed"
	}
	return fmt.Sprintf("rules %s: tcp ports %s -> %d (chain %s)", state, strings.Join(ports, ","), r.ProxyPort, r.ChainName())
}
