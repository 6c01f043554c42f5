package transparent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DefaultChain is the nat chain Stormgate owns when Rules.Chain is empty.
const DefaultChain = "STORMGATE_INBOUND"

// maxChainName is iptables' limit on a chain name (XT_EXTENSION_MAXNAMELEN less the NUL).
const maxChainName = 28

// maxJumps bounds the loop that removes duplicated PREROUTING jumps, so a Runner that never reports the
// rule as gone cannot spin forever.
const maxJumps = 64

// Rules describes the inbound REDIRECT rules for one pod (one network namespace).
// The zero value is not valid: InboundPorts and ProxyPort must be set.
type Rules struct {
	// Chain is the dedicated nat chain holding the REDIRECT rules. Empty means DefaultChain.
	Chain string
	// InboundPorts are the provider ports whose inbound TCP connections are redirected to ProxyPort.
	// Order is kept; duplicates are ignored. Stormgate forwards only to these ports (the allow-list).
	InboundPorts []uint16
	// ProxyPort is the port of Stormgate's transparent listener.
	ProxyPort uint16
}

// ChainName returns r.Chain, or DefaultChain when it is empty.
func (r Rules) ChainName() string {
	if r.Chain == "" {
		return DefaultChain
	}
	return r.Chain
}

// Ports returns InboundPorts without duplicates, in their first-seen order.
func (r Rules) Ports() []uint16 {
	out := make([]uint16, 0, len(r.InboundPorts))
	for _, p := range r.InboundPorts {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// Validate reports what is wrong with r, in words a user of `sidecar iptables` can act on.
func (r Rules) Validate() error {
	if err := ValidateChain(r.ChainName()); err != nil {
		return err
	}
	if len(r.InboundPorts) == 0 {
		return errors.New("no inbound ports: name at least one provider port to redirect (e.g. 20880)")
	}
	if r.ProxyPort == 0 {
		return errors.New("proxy port is 0: name the port of Stormgate's transparent listener (e.g. 15006)")
	}
	for _, p := range r.InboundPorts {
		if p == 0 {
			return errors.New("inbound port 0 is not a port")
		}
		if p == r.ProxyPort {
			return fmt.Errorf("inbound port %d is the proxy port itself: redirecting it would loop", p)
		}
	}
	return nil
}

// ValidateChain checks that name can be a user-defined iptables chain.
func ValidateChain(name string) error {
	if name == "" || len(name) > maxChainName {
		return fmt.Errorf("chain name %q: must be 1 to %d characters", name, maxChainName)
	}
	if name[0] == '-' || name[0] == '!' {
		return fmt.Errorf("chain name %q: must not start with %q", name, name[0])
	}
	for _, c := range name {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("chain name %q: only letters, digits, '_' and '-' are allowed", name)
		}
	}
	switch name {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING", "ACCEPT", "DROP", "RETURN", "REDIRECT":
		return fmt.Errorf("chain name %q is built in; pick a chain Stormgate can own", name)
	}
	return nil
}

// jumpSpec is the PREROUTING rule that sends inbound TCP to chain (without the -A/-C/-D verb).
func jumpSpec(chain string) []string {
	return []string{"PREROUTING", "-p", "tcp", "-j", chain}
}

// redirectSpec is the rule in chain that redirects one inbound port (without the verb).
func (r Rules) redirectSpec(port uint16) []string {
	return []string{r.ChainName(), "-p", "tcp", "--dport", strconv.Itoa(int(port)),
		"-j", "REDIRECT", "--to-ports", strconv.Itoa(int(r.ProxyPort))}
}

func nat(verb string, spec ...string) []string {
	return append([]string{"-t", "nat", verb}, spec...)
}

// InstallCommands returns the iptables arguments (without the program name) that Install runs on a table
// that holds none of the rules yet, in order: create the chain, fill it, then jump to it from PREROUTING
// (last, so no packet ever meets a half-filled chain).
func (r Rules) InstallCommands() [][]string {
	cmds := [][]string{nat("-N", r.ChainName())}
	for _, p := range r.Ports() {
		cmds = append(cmds, nat("-A", r.redirectSpec(p)...))
	}
	return append(cmds, nat("-A", jumpSpec(r.ChainName())...))
}

// CleanCommands returns the iptables arguments that Clean runs on a table holding the rules: remove the
// jump, flush the chain, delete it. Nothing else in the table is touched.
func CleanCommands(chain string) [][]string {
	return [][]string{
		nat("-D", jumpSpec(chain)...),
		nat("-F", chain),
		nat("-X", chain),
	}
}

// DryRun returns, as shell command lines starting with program (e.g. "iptables"), what Install (clean
// false) or Clean (clean true) would run on a table in the opposite state. It runs nothing.
func (r Rules) DryRun(program string, clean bool) []string {
	cmds := r.InstallCommands()
	if clean {
		cmds = CleanCommands(r.ChainName())
	}
	lines := make([]string, len(cmds))
	for i, c := range cmds {
		lines[i] = FormatCommand(append([]string{program}, c...))
	}
	return lines
}

// FormatCommand joins argv into one line a POSIX shell would split back into argv.
func FormatCommand(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = shellQuote(a)
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(c rune) bool {
		return !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=,+@%", c))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Install makes the table hold exactly r's rules and reports whether it changed anything. Running it again
// changes nothing. When the chain exists with other content (say, a different port list from an earlier
// run), the chain is flushed and refilled; the PREROUTING jump is added only when missing.
func Install(ctx context.Context, run Runner, r Rules) (changed bool, err error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	chain := r.ChainName()
	exists, count, err := chainRules(ctx, run, chain)
	if err != nil {
		return false, err
	}
	if !exists {
		if _, err := run.Run(ctx, nat("-N", chain)...); err != nil {
			return false, fmt.Errorf("create chain %s: %w", chain, err)
		}
		changed = true
	}
	want := r.Ports()
	same := exists && count == len(want)
	for i := 0; same && i < len(want); i++ {
		if same, err = present(ctx, run, r.redirectSpec(want[i])); err != nil {
			return changed, err
		}
	}
	if !same {
		if count > 0 {
			if _, err := run.Run(ctx, nat("-F", chain)...); err != nil {
				return changed, fmt.Errorf("flush chain %s: %w", chain, err)
			}
		}
		for _, p := range want {
			if _, err := run.Run(ctx, nat("-A", r.redirectSpec(p)...)...); err != nil {
				return true, fmt.Errorf("redirect port %d: %w", p, err)
			}
		}
		changed = true
	}
	ok, err := present(ctx, run, jumpSpec(chain))
	if err != nil {
		return changed, err
	}
	if !ok {
		if _, err := run.Run(ctx, nat("-A", jumpSpec(chain)...)...); err != nil {
			return true, fmt.Errorf("jump from PREROUTING to %s: %w", chain, err)
		}
		changed = true
	}
	return changed, nil
}

// Clean removes the PREROUTING jump to chain (every copy of it), then the chain itself, and nothing else.
// It reports whether it changed anything; on a table without the chain it runs only the read-only check.
func Clean(ctx context.Context, run Runner, chain string) (changed bool, err error) {
	if err := ValidateChain(chain); err != nil {
		return false, err
	}
	exists, _, err := chainRules(ctx, run, chain)
	if err != nil || !exists {
		return false, err
	}
	for range maxJumps {
		ok, err := present(ctx, run, jumpSpec(chain))
		if err != nil {
			return changed, err
		}
		if !ok {
			break
		}
		if _, err := run.Run(ctx, nat("-D", jumpSpec(chain)...)...); err != nil {
			return changed, fmt.Errorf("remove jump from PREROUTING: %w", err)
		}
		changed = true
	}
	if _, err := run.Run(ctx, nat("-F", chain)...); err != nil {
		return changed, fmt.Errorf("flush chain %s: %w", chain, err)
	}
	if _, err := run.Run(ctx, nat("-X", chain)...); err != nil {
		return true, fmt.Errorf("delete chain %s (is it still referenced by a rule Stormgate did not add?): %w", chain, err)
	}
	return true, nil
}

// chainRules lists chain (`-t nat -S chain`): whether it exists and how many rules it holds.
func chainRules(ctx context.Context, run Runner, chain string) (exists bool, count int, err error) {
	out, err := run.Run(ctx, nat("-S", chain)...)
	if isNo(err) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("list chain %s: %w", chain, err)
	}
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, "-A ") {
			count++
		}
	}
	return true, count, nil
}

// present runs `-t nat -C spec`: exit 0 means the rule exists, exit 1 that it does not.
func present(ctx context.Context, run Runner, spec []string) (bool, error) {
	_, err := run.Run(ctx, nat("-C", spec...)...)
	if isNo(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check rule %q: %w", strings.Join(spec, " "), err)
	}
	return true, nil
}

// isNo reports whether err is iptables' exit status 1, its answer for "no such rule/chain". Other statuses
// (2: bad arguments, 4: no permission or kernel support) are real errors.
func isNo(err error) bool {
	var ee *ExitError
	return errors.As(err, &ee) && ee.Code == 1
}

// ParsePorts parses a comma-separated port list such as "20880" or "20880, 20881" (the form of the
// --inbound-ports flag and the stormgate.io/inbound-ports annotation). Empty items are skipped; anything
// that is not 1-65535 is an error naming the offending item.
func ParsePorts(list string) ([]uint16, error) {
	var ports []uint16
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("port %q: want a number from 1 to 65535", s)
		}
		ports = append(ports, uint16(n))
	}
	return ports, nil
}

// FormatPorts writes ports the way ParsePorts reads them: "20880,20881".
func FormatPorts(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
