package xds

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Keys of the xDS node metadata (core.Node.metadata) a Stormgate sidecar
// reports and control-plane selectors match on. The cluster travels in the
// standard node.cluster field.
const (
	// MetaNamespace is the pod's namespace (a string).
	MetaNamespace = "namespace"
	// MetaLabels is the pod's labels (a struct of string values).
	MetaLabels = "labels"
	// MetaProviderPorts is the provider ports the sidecar forwards to (a
	// list of numbers): the port of upstream.address, or in transparent
	// mode listener.inbound_ports.
	MetaProviderPorts = "provider_ports"
)

// EnvPodLabels is the variable `sidecar run` reads the pod's labels from
// (k=v,k=v) to report them in MetaLabels; `sidecar inject` sets it.
const EnvPodLabels = "STORMGATE_POD_LABELS"

// NodeInfo is what a sidecar tells the control plane about itself: its node
// id and the attributes selectors match on.
type NodeInfo struct {
	ID        string
	Cluster   string
	Namespace string
	Labels    map[string]string
	Ports     []int32 // sorted, no duplicates
}

// node builds the xDS node a client sends.
func (n NodeInfo) node() *adsNode {
	node := &adsNode{ID: n.ID, Cluster: n.Cluster, UserAgentName: "stormgate"}
	fields := map[string]*structpb.Value{}
	if n.Namespace != "" {
		fields[MetaNamespace] = structpb.NewStringValue(n.Namespace)
	}
	if len(n.Labels) > 0 {
		ls := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(n.Labels))}
		for k, v := range n.Labels {
			ls.Fields[k] = structpb.NewStringValue(v)
		}
		fields[MetaLabels] = structpb.NewStructValue(ls)
	}
	if len(n.Ports) > 0 {
		ps := &structpb.ListValue{}
		for _, p := range n.Ports {
			ps.Values = append(ps.Values, structpb.NewNumberValue(float64(p)))
		}
		fields[MetaProviderPorts] = structpb.NewListValue(ps)
	}
	if len(fields) > 0 {
		node.Metadata = &structpb.Struct{Fields: fields}
	}
	return node
}

func sortedPorts(ps []int32) []int32 {
	slices.Sort(ps)
	return slices.Compact(ps)
}

// String is a short description for logs: id, cluster, namespace, labels, ports.
func (n NodeInfo) String() string {
	parts := []string{n.ID}
	if n.Cluster != "" {
		parts = append(parts, "cluster="+n.Cluster)
	}
	if n.Namespace != "" {
		parts = append(parts, "namespace="+n.Namespace)
	}
	if len(n.Labels) > 0 {
		parts = append(parts, "labels="+FormatLabels(n.Labels))
	}
	if len(n.Ports) > 0 {
		ps := make([]string, len(n.Ports))
		for i, p := range n.Ports {
			ps[i] = strconv.Itoa(int(p))
		}
		parts = append(parts, "ports="+strings.Join(ps, ","))
	}
	return strings.Join(parts, " ")
}

// FormatLabels prints labels as k=v,k=v in key order.
func FormatLabels(ls map[string]string) string {
	keys := make([]string, 0, len(ls))
	for k := range ls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + ls[k]
	}
	return strings.Join(keys, ",")
}

// ParseLabels reads labels written as "app=payment,track=canary" (the form
// of --xds-labels and STORMGATE_POD_LABELS). Empty input is no labels.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q: want key=value", part)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// ReadLabelsFile reads a Kubernetes downward-API labels file (a volume item
// with fieldRef metadata.labels): one key="value" per line, the value quoted
// as a Go string.
func ReadLabelsFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		k, q, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s line %d: want key=\"value\"", path, line)
		}
		v, err := strconv.Unquote(q)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: value of %s: want a quoted string, got %s", path, line, k, q)
		}
		out[k] = v
	}
	return out, sc.Err()
}

// ProviderPorts returns the provider ports settings forward to: the port of
// upstream.address, or in transparent mode listener.inbound_ports. They are
// reported as node metadata (MetaProviderPorts) for port selectors.
func ProviderPorts(s *sg.Settings) []int32 {
	if s.GetListener().GetTransparent() {
		return sortedPorts(slices.Clone(s.GetListener().GetInboundPorts()))
	}
	_, p, err := net.SplitHostPort(s.GetUpstream().GetAddress())
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return nil
	}
	return []int32{int32(n)}
}
