package controlplane

import (
	"slices"
	"sort"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/stormgate/stormgate/xds"
)

// NodeInfoOf reads what a node reports. Metadata of the wrong type is
// ignored (the node then matches no selector that needs it).
func NodeInfoOf(node *core.Node) xds.NodeInfo {
	n := xds.NodeInfo{ID: node.GetId(), Cluster: node.GetCluster()}
	md := node.GetMetadata().GetFields()
	n.Namespace = md[xds.MetaNamespace].GetStringValue()
	if ls := md[xds.MetaLabels].GetStructValue().GetFields(); len(ls) > 0 {
		n.Labels = make(map[string]string, len(ls))
		for k, v := range ls {
			if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
				n.Labels[k] = s.StringValue
			}
		}
	}
	for _, v := range md[xds.MetaProviderPorts].GetListValue().GetValues() {
		if f, ok := v.GetKind().(*structpb.Value_NumberValue); ok && f.NumberValue >= 1 && f.NumberValue <= 65535 {
			n.Ports = append(n.Ports, int32(f.NumberValue))
		}
	}
	n.Ports = sortedPorts(n.Ports)
	return n
}

// classKey identifies everything selectors can match on (all but the id):
// nodes with equal keys resolve to the same settings unless the file names
// one of them under nodes:.
func classKey(n xds.NodeInfo) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(n.Cluster))
	b.WriteByte('|')
	b.WriteString(strconv.Quote(n.Namespace))
	b.WriteByte('|')
	for _, p := range n.Ports {
		b.WriteString(strconv.Itoa(int(p)))
		b.WriteByte(',')
	}
	b.WriteByte('|')
	keys := make([]string, 0, len(n.Labels))
	for k := range n.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(n.Labels[k]))
		b.WriteByte(',')
	}
	return b.String()
}

func sortedPorts(ps []int32) []int32 {
	slices.Sort(ps)
	return slices.Compact(ps)
}
