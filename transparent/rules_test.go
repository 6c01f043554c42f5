package transparent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// fakeIptables models the nat table closely enough to check Install and Clean: user chains, rule order,
// and the exit statuses real iptables (nft and legacy 1.8.9, both checked by hand) gives: 1 for "no such
// rule/chain" or "chain exists", 2 for a jump to an unknown target.
type fakeIptables struct {
	order  []string            // chains in creation order, builtins first
	chains map[string][]string // chain -> rule specs (everything after the chain name)
	cmds   [][]string          // every command run
	fail   map[string]int      // verb -> exit code to fail with
}

func newFake() *fakeIptables {
	f := &fakeIptables{chains: map[string][]string{}}
	for _, c := range []string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"} {
		f.order = append(f.order, c)
		f.chains[c] = nil
	}
	return f
}

var builtinTargets = []string{"ACCEPT", "DROP", "RETURN", "REDIRECT", "DNAT", "MASQUERADE"}

func (f *fakeIptables) Run(_ context.Context, args ...string) ([]byte, error) {
	f.cmds = append(f.cmds, slices.Clone(args))
	fail := func(code int, msg string) ([]byte, error) {
		return nil, &ExitError{Argv: append([]string{"iptables"}, args...), Code: code, Stderr: msg}
	}
	if len(args) < 4 || args[0] != "-t" || args[1] != "nat" {
		return fail(2, "fake: unsupported command")
	}
	verb, chain, spec := args[2], args[3], strings.Join(args[4:], " ")
	if code, ok := f.fail[verb]; ok {
		return fail(code, "fake: injected failure")
	}
	rules, exists := f.chains[chain]
	if verb != "-N" && !exists {
		return fail(1, "iptables: No chain/target/match by that name.")
	}
	if verb == "-A" || verb == "-C" {
		if i := slices.Index(args, "-j"); i >= 0 && i+1 < len(args) {
			t := args[i+1]
			if _, ok := f.chains[t]; !ok && !slices.Contains(builtinTargets, t) {
				return fail(2, "Couldn't load target `"+t+"'")
			}
		}
	}
	switch verb {
	case "-S":
		var b strings.Builder
		if slices.Contains([]string{"PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"}, chain) {
			fmt.Fprintf(&b, "-P %s ACCEPT\n", chain)
		} else {
			fmt.Fprintf(&b, "-N %s\n", chain)
		}
		for _, r := range rules {
			fmt.Fprintf(&b, "-A %s %s\n", chain, r)
		}
		return []byte(b.String()), nil
	case "-N":
		if exists {
			return fail(1, "iptables: Chain already exists.")
		}
		f.order = append(f.order, chain)
		f.chains[chain] = nil
	case "-A":
		f.chains[chain] = append(rules, spec)
	case "-C":
		if !slices.Contains(rules, spec) {
			return fail(1, "iptables: Bad rule (does a matching rule exist in that chain?).")
		}
	case "-D":
		i := slices.Index(rules, spec)
		if i < 0 {
			return fail(1, "iptables: Bad rule (does a matching rule exist in that chain?).")
		}
		f.chains[chain] = slices.Delete(rules, i, i+1)
	case "-F":
		f.chains[chain] = nil
	case "-X":
		for c, rs := range f.chains {
			for _, r := range rs {
				if strings.HasSuffix(r, "-j "+chain) {
					return fail(1, "iptables: Too many links. (referenced from "+c+")")
				}
			}
		}
		delete(f.chains, chain)
		f.order = slices.DeleteFunc(f.order, func(c string) bool { return c == chain })
	default:
		return fail(2, "fake: unsupported verb "+verb)
	}
	return nil, nil
}

// dump is the whole table in `iptables -t nat -S` shape.
func (f *fakeIptables) dump() string {
	var b strings.Builder
	for _, c := range f.order {
		out, _ := f.Run(context.Background(), "-t", "nat", "-S", c)
		b.Write(out)
	}
	f.cmds = nil
	return b.String()
}

func (f *fakeIptables) take() [][]string {
	c := f.cmds
	f.cmds = nil
	return c
}

func split(lines ...string) [][]string {
	out := make([][]string, len(lines))
	for i, l := range lines {
		out[i] = strings.Fields(l)
	}
	return out
}

func checkCmds(t *testing.T, got [][]string, want ...string) {
	t.Helper()
	w := split(want...)
	if !slices.EqualFunc(got, w, slices.Equal) {
		var g []string
		for _, c := range got {
			g = append(g, strings.Join(c, " "))
		}
		t.Fatalf("commands:\n got  %q\n want %q", g, want)
	}
}

var testRules = Rules{InboundPorts: []uint16{20880, 20881}, ProxyPort: 15006}

func TestInstallFreshThenAgainIsNoop(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	changed, err := Install(ctx, f, testRules)
	if err != nil || !changed {
		t.Fatalf("first install: changed=%v err=%v", changed, err)
	}
	checkCmds(t, f.take(),
		"-t nat -S STORMGATE_INBOUND",
		"-t nat -N STORMGATE_INBOUND",
		"-t nat -A STORMGATE_INBOUND -p tcp --dport 20880 -j REDIRECT --to-ports 15006",
		"-t nat -A STORMGATE_INBOUND -p tcp --dport 20881 -j REDIRECT --to-ports 15006",
		"-t nat -C PREROUTING -p tcp -j STORMGATE_INBOUND",
		"-t nat -A PREROUTING -p tcp -j STORMGATE_INBOUND",
	)
	once := f.dump()
	wantTable := `-P PREROUTING ACCEPT
-A PREROUTING -p tcp -j STORMGATE_INBOUND
-P INPUT ACCEPT
-P OUTPUT ACCEPT
-P POSTROUTING ACCEPT
-N STORMGATE_INBOUND
-A STORMGATE_INBOUND -p tcp --dport 20880 -j REDIRECT --to-ports 15006
-A STORMGATE_INBOUND -p tcp --dport 20881 -j REDIRECT --to-ports 15006
`
	if once != wantTable {
		t.Fatalf("table after install:\n%s\nwant:\n%s", once, wantTable)
	}

	changed, err = Install(ctx, f, testRules)
	if err != nil || changed {
		t.Fatalf("second install: changed=%v err=%v, want no change", changed, err)
	}
	checkCmds(t, f.take(), // read-only checks only
		"-t nat -S STORMGATE_INBOUND",
		"-t nat -C STORMGATE_INBOUND -p tcp --dport 20880 -j REDIRECT --to-ports 15006",
		"-t nat -C STORMGATE_INBOUND -p tcp --dport 20881 -j REDIRECT --to-ports 15006",
		"-t nat -C PREROUTING -p tcp -j STORMGATE_INBOUND",
	)
	if twice := f.dump(); twice != once {
		t.Fatalf("second install changed the table:\n%s\nwas:\n%s", twice, once)
	}
}

func TestInstallMatchesInstallCommands(t *testing.T) {
	ctx := context.Background()
	viaInstall, viaList := newFake(), newFake()
	if _, err := Install(ctx, viaInstall, testRules); err != nil {
		t.Fatal(err)
	}
	for _, c := range testRules.InstallCommands() {
		if _, err := viaList.Run(ctx, c...); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := viaInstall.dump(), viaList.dump(); a != b {
		t.Fatalf("Install and InstallCommands disagree:\n%s\nvs\n%s", a, b)
	}
}

func TestInstallConvergesWhenPortsChange(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		before []uint16
		want   []string
	}{
		{"fewer ports", []uint16{20880}, []string{
			"-t nat -S STORMGATE_INBOUND",
			"-t nat -F STORMGATE_INBOUND",
			"-t nat -A STORMGATE_INBOUND -p tcp --dport 20880 -j REDIRECT --to-ports 15006",
			"-t nat -A STORMGATE_INBOUND -p tcp --dport 20881 -j REDIRECT --to-ports 15006",
			"-t nat -C PREROUTING -p tcp -j STORMGATE_INBOUND",
		}},
		{"same count, one port differs", []uint16{20880, 20999}, []string{
			"-t nat -S STORMGATE_INBOUND",
			"-t nat -C STORMGATE_INBOUND -p tcp --dport 20880 -j REDIRECT --to-ports 15006",
			"-t nat -C STORMGATE_INBOUND -p tcp --dport 20881 -j REDIRECT --to-ports 15006",
			"-t nat -F STORMGATE_INBOUND",
			"-t nat -A STORMGATE_INBOUND -p tcp --dport 20880 -j REDIRECT --to-ports 15006",
			"-t nat -A STORMGATE_INBOUND -p tcp --dport 20881 -j REDIRECT --to-ports 15006",
			"-t nat -C PREROUTING -p tcp -j STORMGATE_INBOUND",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, fresh := newFake(), newFake()
			if _, err := Install(ctx, f, Rules{InboundPorts: tc.before, ProxyPort: 15006}); err != nil {
				t.Fatal(err)
			}
			f.take()
			changed, err := Install(ctx, f, testRules)
			if err != nil || !changed {
				t.Fatalf("changed=%v err=%v", changed, err)
			}
			checkCmds(t, f.take(), tc.want...)
			if _, err := Install(ctx, fresh, testRules); err != nil {
				t.Fatal(err)
			}
			if got, want := f.dump(), fresh.dump(); got != want {
				t.Fatalf("table after change:\n%s\nwant (as a fresh install):\n%s", got, want)
			}
		})
	}
}

func TestInstallDuplicatePortsOnce(t *testing.T) {
	f := newFake()
	if _, err := Install(context.Background(), f, Rules{InboundPorts: []uint16{20880, 20880}, ProxyPort: 15006}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.chains[DefaultChain]); n != 1 {
		t.Fatalf("chain holds %d rules, want 1", n)
	}
	f.take()
	if changed, err := Install(context.Background(), f, Rules{InboundPorts: []uint16{20880, 20880}, ProxyPort: 15006}); err != nil || changed {
		t.Fatalf("re-install with duplicate ports: changed=%v err=%v", changed, err)
	}
}

func TestCleanRestoresTableExactly(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	// Someone else's rules, which Clean must leave alone.
	for _, c := range [][]string{
		{"-t", "nat", "-N", "OTHER"},
		{"-t", "nat", "-A", "OTHER", "-p", "tcp", "--dport", "80", "-j", "RETURN"},
		{"-t", "nat", "-A", "PREROUTING", "-p", "tcp", "-j", "OTHER"},
	} {
		if _, err := f.Run(ctx, c...); err != nil {
			t.Fatal(err)
		}
	}
	before := f.dump()
	if _, err := Install(ctx, f, testRules); err != nil {
		t.Fatal(err)
	}
	f.take()
	changed, err := Clean(ctx, f, DefaultChain)
	if err != nil || !changed {
		t.Fatalf("clean: changed=%v err=%v", changed, err)
	}
	checkCmds(t, f.take(),
		"-t nat -S STORMGATE_INBOUND",
		"-t nat -C PREROUTING -p tcp -j STORMGATE_INBOUND",
		"-t nat -D PREROUTING -p tcp -j STORMGATE_INBOUND",
		"-t nat -C PREROUTING -p tcp -j STORMGATE_INBOUND",
		"-t nat -F STORMGATE_INBOUND",
		"-t nat -X STORMGATE_INBOUND",
	)
	if after := f.dump(); after != before {
		t.Fatalf("clean left the table as\n%s\nwant\n%s", after, before)
	}
	changed, err = Clean(ctx, f, DefaultChain)
	if err != nil || changed {
		t.Fatalf("second clean: changed=%v err=%v, want no change", changed, err)
	}
	checkCmds(t, f.take(), "-t nat -S STORMGATE_INBOUND")
}

func TestCleanRemovesDuplicatedJumps(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	if _, err := Install(ctx, f, testRules); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Run(ctx, "-t", "nat", "-A", "PREROUTING", "-p", "tcp", "-j", DefaultChain); err != nil {
		t.Fatal(err)
	}
	if _, err := Clean(ctx, f, DefaultChain); err != nil {
		t.Fatal(err)
	}
	if got := f.dump(); strings.Contains(got, DefaultChain) {
		t.Fatalf("chain or jump left behind:\n%s", got)
	}
}

func TestCleanLeavesForeignReferenceAndSaysSo(t *testing.T) {
	ctx := context.Background()
	f := newFake()
	if _, err := Install(ctx, f, testRules); err != nil {
		t.Fatal(err)
	}
	// A jump Stormgate did not add (from OUTPUT): Clean must not remove it, so deleting the chain fails.
	if _, err := f.Run(ctx, "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-j", DefaultChain); err != nil {
		t.Fatal(err)
	}
	_, err := Clean(ctx, f, DefaultChain)
	if err == nil || !strings.Contains(err.Error(), "still referenced") {
		t.Fatalf("err = %v, want a 'still referenced' error", err)
	}
	if len(f.chains["OUTPUT"]) != 1 {
		t.Fatal("Clean touched a rule it did not add")
	}
}

func TestRunnerErrorsStopEarly(t *testing.T) {
	ctx := context.Background()
	for _, verb := range []string{"-S", "-N", "-A", "-C"} {
		t.Run(verb, func(t *testing.T) {
			f := newFake()
			f.fail = map[string]int{verb: 4}
			_, err := Install(ctx, f, testRules)
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != 4 {
				t.Fatalf("err = %v, want the runner's exit status 4", err)
			}
			if last := f.cmds[len(f.cmds)-1]; last[2] != verb {
				t.Fatalf("ran %q after the failing %s", last, verb)
			}
		})
	}
	f := newFake()
	if _, err := Install(ctx, f, testRules); err != nil {
		t.Fatal(err)
	}
	f.fail = map[string]int{"-D": 4}
	if _, err := Clean(ctx, f, DefaultChain); err == nil {
		t.Fatal("clean with a failing -D succeeded")
	}
	if _, ok := f.chains[DefaultChain]; !ok {
		t.Fatal("clean deleted the chain after failing to remove the jump")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		r    Rules
		want string // substring of the error; "" = valid
	}{
		{testRules, ""},
		{Rules{Chain: "MY-CHAIN_1", InboundPorts: []uint16{1}, ProxyPort: 2}, ""},
		{Rules{ProxyPort: 15006}, "no inbound ports"},
		{Rules{InboundPorts: []uint16{20880}}, "proxy port is 0"},
		{Rules{InboundPorts: []uint16{0}, ProxyPort: 15006}, "port 0"},
		{Rules{InboundPorts: []uint16{15006}, ProxyPort: 15006}, "loop"},
		{Rules{Chain: "PREROUTING", InboundPorts: []uint16{1}, ProxyPort: 2}, "built in"},
		{Rules{Chain: "-X", InboundPorts: []uint16{1}, ProxyPort: 2}, "must not start"},
		{Rules{Chain: "A B", InboundPorts: []uint16{1}, ProxyPort: 2}, "only letters"},
		{Rules{Chain: strings.Repeat("C", 29), InboundPorts: []uint16{1}, ProxyPort: 2}, "1 to 28"},
	} {
		err := tc.r.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: err = %v, want %q", tc.r, err, tc.want)
		}
	}
	// Install refuses invalid rules before running anything.
	f := newFake()
	if _, err := Install(context.Background(), f, Rules{}); err == nil || len(f.cmds) != 0 {
		t.Fatalf("install of zero Rules: err=%v, ran %d commands", err, len(f.cmds))
	}
}

func TestDryRun(t *testing.T) {
	r := Rules{Chain: "SG", InboundPorts: []uint16{20880}, ProxyPort: 15006}
	got := r.DryRun("iptables", false)
	want := []string{
		"iptables -t nat -N SG",
		"iptables -t nat -A SG -p tcp --dport 20880 -j REDIRECT --to-ports 15006",
		"iptables -t nat -A PREROUTING -p tcp -j SG",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("install dry run:\n%q\nwant\n%q", got, want)
	}
	got = r.DryRun("ip6tables", true)
	want = []string{
		"ip6tables -t nat -D PREROUTING -p tcp -j SG",
		"ip6tables -t nat -F SG",
		"ip6tables -t nat -X SG",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("clean dry run:\n%q\nwant\n%q", got, want)
	}
}

func TestFormatCommand(t *testing.T) {
	got := FormatCommand([]string{"ip", "netns", "exec", "my pod", "it's", "", "a=b,c:d"})
	want := `ip netns exec 'my pod' 'it'\''s' '' a=b,c:d`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

func TestExecRunner(t *testing.T) {
	ctx := context.Background()
	r := ExecRunner{Argv: []string{"sh", "-c", `echo out; echo "  err  " >&2; exit "$0"`}}
	out, err := r.Run(ctx, "0")
	if err != nil || string(out) != "out\n" {
		t.Fatalf("exit 0: out=%q err=%v", out, err)
	}
	_, err = r.Run(ctx, "3")
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || ee.Stderr != "err" {
		t.Fatalf("exit 3: err=%#v", err)
	}
	if !strings.Contains(err.Error(), "exit status 3: err") {
		t.Fatalf("error text %q", err)
	}
	_, err = ExecRunner{Argv: []string{"/nonexistent/iptables"}}.Run(ctx, "-S")
	if err == nil || errors.As(err, &ee) {
		t.Fatalf("missing program: err=%v, want a non-ExitError", err)
	}
	if p := (ExecRunner{}).Program(); !slices.Equal(p, []string{"iptables"}) {
		t.Fatalf("default program %q", p)
	}
}

func TestParsePorts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint16
		err  string
	}{
		{"20880", []uint16{20880}, ""},
		{" 20880, 20881 ,", []uint16{20880, 20881}, ""},
		{"", nil, ""},
		{"65535,1", []uint16{65535, 1}, ""},
		{"0", nil, `port "0"`},
		{"65536", nil, `port "65536"`},
		{"20880,x", nil, `port "x"`},
		{"-1", nil, `port "-1"`},
	} {
		got, err := ParsePorts(tc.in)
		if tc.err == "" && (err != nil || !slices.Equal(got, tc.want)) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParsePorts(%q) = %v, %v; want %v, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}
