package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/transparent"
)

func runCmdForTest(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestIptablesDryRun: --dry-run prints exactly what each backend would install or remove, runs
// nothing (so it needs no privilege), and bad input fails with the flag's name.
func TestIptablesDryRun(t *testing.T) {
	rules := transparent.Rules{InboundPorts: []uint16{20880, 20881}, ProxyPort: 15006}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--inbound-ports", "20880,20881", "--dry-run", "--ipv6"}, transparent.NFT{}.Script(rules)},
		{[]string{"--inbound-ports", "20880,20881", "--dry-run", "--ipv6=false"}, transparent.NFT{IPv4Only: true}.Script(rules)},
		{[]string{"--clean", "--dry-run"}, "# removes whichever of these tables exist\ndelete table inet stormgate\ndelete table ip stormgate\n"},
		{[]string{"--inbound-ports", "20880,20881", "--dry-run", "--backend", "iptables", "--ipv6"},
			strings.Join(append(rules.DryRun("iptables", false), rules.DryRun("ip6tables", false)...), "\n") + "\n"},
		{[]string{"--inbound-ports", "20880", "--dry-run", "--backend", "iptables", "--ipv6=false", "--iptables", "iptables-legacy"},
			"iptables-legacy -t nat -N STORMGATE_INBOUND\niptables-legacy -t nat -A STORMGATE_INBOUND -p tcp --dport 20880 -j REDIRECT --to-ports 15006\n" +
				"iptables-legacy -t nat -A PREROUTING -p tcp -j STORMGATE_INBOUND\n"},
	} {
		got, err := runCmdForTest(t, append([]string{"iptables"}, tc.args...)...)
		if err != nil || got != tc.want {
			t.Errorf("sidecar iptables %s:\n%s(err %v)\nwant\n%s", strings.Join(tc.args, " "), got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--inbound-ports", "20880", "--backend", "pf", "--dry-run"}, `--backend "pf"`},
		{[]string{"--inbound-ports", "x", "--dry-run"}, `--inbound-ports: port "x"`},
		{[]string{"--dry-run"}, "no inbound ports"},
		{[]string{"--inbound-ports", "15006", "--dry-run"}, "would loop"},
	} {
		_, err := runCmdForTest(t, append([]string{"iptables"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("sidecar iptables %s: err %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
