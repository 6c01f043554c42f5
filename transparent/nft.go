package transparent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// NFTTable is the nftables table Stormgate owns; NFTChain its one chain. Everything Stormgate installs
// with the nftables backend lives in that table, so removing it removes all of it and nothing else.
const (
	NFTTable = "stormgate"
	NFTChain = "inbound"
)

// nfNATRangeProtoSpecified is NF_NAT_RANGE_PROTO_SPECIFIED (linux/netfilter/nf_nat.h): the redirect
// names a port. The nft program sets it for `redirect to :PORT`; so do we, so the kernel holds the same
// rule whichever tool wrote it.
const nfNATRangeProtoSpecified = 0x2

// NFT programs Rules into the kernel's nftables through netlink: no iptables or nft program, no shell,
// which is what lets one static binary in an empty image be the init container. It installs
// one table, `inet stormgate` (IPv4 and IPv6 in one table), holding a nat chain on the prerouting hook at
// priority dstnat with one `tcp dport P redirect to :PROXY` rule per inbound port.
//
// The zero value programs the current network namespace, IPv4 and IPv6.
type NFT struct {
	// IPv4Only makes the table `ip stormgate` (IPv4 only), for kernels without IPv6 (ipv6.disable=1),
	// where an inet nat chain cannot be created.
	IPv4Only bool
	// NetNS, when non-zero, is an open file descriptor of the network namespace to program (for example
	// of /run/netns/NAME); zero means the namespace of the calling thread.
	NetNS int
}

// Family returns the table family NFT installs: "inet" (IPv4 and IPv6) or "ip" (IPv4 only).
func (n NFT) Family() string {
	if n.IPv4Only {
		return "ip"
	}
	return "inet"
}

func (n NFT) family() nftables.TableFamily {
	if n.IPv4Only {
		return nftables.TableFamilyIPv4
	}
	return nftables.TableFamilyINet
}

// Script returns, in the nft language, exactly what Install makes the table hold: the text
// `nft list table inet stormgate` prints afterwards, and valid input for `nft -f`. It runs nothing.
func (n NFT) Script(r Rules) string {
	t, c, rules := n.desired(r)
	return render(t, []nftChainRules{{c, rules}})
}

// CleanScript returns, in the nft language, what Clean does to a namespace holding the table.
func (n NFT) CleanScript() string {
	return "delete table " + n.Family() + " " + NFTTable + "\n"
}

type nftChainRules struct {
	chain *nftables.Chain
	rules []*nftables.Rule
}

// desired builds the table, chain and rules for r.
func (n NFT) desired(r Rules) (*nftables.Table, *nftables.Chain, []*nftables.Rule) {
	t := &nftables.Table{Name: NFTTable, Family: n.family()}
	accept := nftables.ChainPolicyAccept
	c := &nftables.Chain{
		Name: NFTChain, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept,
	}
	var rules []*nftables.Rule
	for _, p := range r.Ports() {
		rules = append(rules, &nftables.Rule{Table: t, Chain: c, Exprs: redirectExprs(p, r.ProxyPort)})
	}
	return t, c, rules
}

// redirectExprs is `tcp dport <port> redirect to :<proxy>`, expression for expression as nft compiles it.
func redirectExprs(port, proxy uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(proxy)},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: nfNATRangeProtoSpecified},
	}
}

func (n NFT) conn() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if n.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(n.NetNS))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, nftErr("open netlink", err)
	}
	return c, nil
}

// Install makes the namespace hold exactly r's rules in table NFTTable and reports whether it changed
// anything. Running it again changes nothing. When the table holds anything else (other ports, another
// proxy port, a rule someone added), it is replaced whole in one netlink transaction: no packet ever
// meets a half-built table, and a failure leaves the previous state.
func (n NFT) Install(r Rules) (changed bool, err error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	c, err := n.conn()
	if err != nil {
		return false, err
	}
	want := n.Script(r)
	have, err := n.list(c, n.family())
	if err != nil {
		return false, err
	}
	if have == want {
		return false, nil
	}
	t, ch, rules := n.desired(r)
	// add + delete + add in one batch: replaces the table whether or not it exists, atomically.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	c.AddChain(ch)
	for _, rule := range rules {
		c.AddRule(rule)
	}
	if err := c.Flush(); err != nil {
		return false, nftErr("install table "+n.Family()+" "+NFTTable, err)
	}
	got, err := n.list(c, n.family())
	if err != nil {
		return true, err
	}
	if got != want {
		return true, fmt.Errorf("nftables: after install the kernel holds\n%s\nwant\n%s", got, want)
	}
	return true, nil
}

// Clean removes table NFTTable, in both the inet and the ip family (whichever exist), and nothing
// else. It reports whether it removed anything.
func (n NFT) Clean() (changed bool, err error) {
	c, err := n.conn()
	if err != nil {
		return false, err
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyINet, nftables.TableFamilyIPv4} {
		t, err := c.ListTableOfFamily(NFTTable, fam)
		if isNotExist(err) {
			continue
		}
		if err != nil {
			return changed, nftErr("list table", err)
		}
		c.DelTable(t)
		if err := c.Flush(); err != nil {
			return changed, nftErr("delete table "+familyName(fam)+" "+NFTTable, err)
		}
		changed = true
	}
	return changed, nil
}

// List returns the table NFTTable as the kernel holds it, in both families, rendered in the nft
// language ("" when there is none). Expressions Stormgate does not write are shown as a comment.
func (n NFT) List() (string, error) {
	c, err := n.conn()
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyINet, nftables.TableFamilyIPv4} {
		s, err := n.list(c, fam)
		if err != nil {
			return "", err
		}
		out.WriteString(s)
	}
	return out.String(), nil
}

// list renders table NFTTable of family fam ("" when absent).
func (n NFT) list(c *nftables.Conn, fam nftables.TableFamily) (string, error) {
	t, err := c.ListTableOfFamily(NFTTable, fam)
	if isNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", nftErr("list table", err)
	}
	chains, err := c.ListChainsOfTableFamily(fam)
	if err != nil {
		return "", nftErr("list chains", err)
	}
	var all []nftChainRules
	for _, ch := range chains {
		if ch.Table == nil || ch.Table.Name != NFTTable {
			continue
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return "", nftErr("list rules of chain "+ch.Name, err)
		}
		all = append(all, nftChainRules{ch, rules})
	}
	return render(t, all), nil
}

// render writes a table the way `nft list table` does (tabs, one statement per line), for the
// expression shapes Stormgate writes.
func render(t *nftables.Table, chains []nftChainRules) string {
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s {\n", familyName(t.Family), t.Name)
	for i, cr := range chains {
		if i > 0 {
			b.WriteString("\n")
		}
		ch := cr.chain
		fmt.Fprintf(&b, "\tchain %s {\n", ch.Name)
		if ch.Hooknum != nil {
			policy := "accept"
			if ch.Policy != nil && *ch.Policy == nftables.ChainPolicyDrop {
				policy = "drop"
			}
			fmt.Fprintf(&b, "\t\ttype %s hook %s priority %s; policy %s;\n", ch.Type, hookName(*ch.Hooknum), priorityName(ch), policy)
		}
		for _, r := range cr.rules {
			fmt.Fprintf(&b, "\t\t%s\n", renderRule(r.Exprs))
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// renderRule names the one rule shape Stormgate writes; anything else renders as a comment that can
// never equal a rule Stormgate wants, so Install replaces it.
func renderRule(ex []expr.Any) string {
	if len(ex) == 6 {
		meta, ok1 := ex[0].(*expr.Meta)
		proto, ok2 := ex[1].(*expr.Cmp)
		pl, ok3 := ex[2].(*expr.Payload)
		port, ok4 := ex[3].(*expr.Cmp)
		imm, ok5 := ex[4].(*expr.Immediate)
		redir, ok6 := ex[5].(*expr.Redir)
		if ok1 && ok2 && ok3 && ok4 && ok5 && ok6 &&
			meta.Key == expr.MetaKeyL4PROTO && !meta.SourceRegister && meta.Register == 1 &&
			proto.Op == expr.CmpOpEq && proto.Register == 1 && bytes.Equal(proto.Data, []byte{unix.IPPROTO_TCP}) &&
			pl.OperationType == expr.PayloadLoad && pl.DestRegister == 1 && pl.Base == expr.PayloadBaseTransportHeader &&
			pl.Offset == 2 && pl.Len == 2 &&
			port.Op == expr.CmpOpEq && port.Register == 1 && len(port.Data) == 2 &&
			imm.Register == 1 && len(imm.Data) == 2 &&
			redir.RegisterProtoMin == 1 && redir.RegisterProtoMax == 1 && redir.Flags == nfNATRangeProtoSpecified {
			return fmt.Sprintf("tcp dport %d redirect to :%d",
				binaryutil.BigEndian.Uint16(port.Data), binaryutil.BigEndian.Uint16(imm.Data))
		}
	}
	kinds := make([]string, len(ex))
	for i, e := range ex {
		kinds[i] = strings.TrimPrefix(fmt.Sprintf("%T", e), "*expr.")
	}
	return "# rule not written by Stormgate: " + strings.Join(kinds, " ")
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	}
	return "family" + strconv.Itoa(int(f))
}

func hookName(h nftables.ChainHook) string {
	names := map[nftables.ChainHook]string{
		*nftables.ChainHookPrerouting: "prerouting", *nftables.ChainHookInput: "input",
		*nftables.ChainHookForward: "forward", *nftables.ChainHookOutput: "output",
		*nftables.ChainHookPostrouting: "postrouting",
	}
	if s, ok := names[h]; ok {
		return s
	}
	return strconv.Itoa(int(h))
}

// priorityName prints a nat prerouting chain's priority as nft does (dstnat is -100).
func priorityName(ch *nftables.Chain) string {
	if ch.Priority == nil {
		return "0"
	}
	p := *ch.Priority
	if ch.Type == nftables.ChainTypeNAT && ch.Hooknum != nil && *ch.Hooknum == *nftables.ChainHookPrerouting {
		switch d := p - *nftables.ChainPriorityNATDest; {
		case d == 0:
			return "dstnat"
		case d > 0 && d <= 10:
			return "dstnat + " + strconv.Itoa(int(d))
		case d < 0 && d >= -10:
			return "dstnat - " + strconv.Itoa(int(-d))
		}
	}
	return strconv.Itoa(int(p))
}

func isNotExist(err error) bool {
	return err != nil && (errors.Is(err, unix.ENOENT) || errors.Is(err, os.ErrNotExist))
}

// nftErr adds to err what an operator can do about the usual causes.
func nftErr(op string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, os.ErrPermission):
		return fmt.Errorf("nftables: %s: %w: this needs CAP_NET_ADMIN in the pod's network namespace "+
			"(init container securityContext: capabilities.add [NET_ADMIN], runAsUser 0)", op, err)
	case errors.Is(err, unix.EAFNOSUPPORT), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, syscall.EPROTONOSUPPORT):
		return fmt.Errorf("nftables: %s: %w: the kernel lacks nf_tables or its nat support "+
			"(modules nf_tables, nft_chain_nat, nft_redir); on such nodes use --backend iptables", op, err)
	}
	return fmt.Errorf("nftables: %s: %w", op, err)
}
