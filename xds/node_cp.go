//go:build !dataplane

package xds

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// NodeInfoOf reads what a node reports. Metadata of the wrong type is
// ignored (the node then matches no selector that needs it).
func NodeInfoOf(node *core.Node) NodeInfo {
	n := NodeInfo{ID: node.GetId(), Cluster: node.GetCluster()}
	md := node.GetMetadata().GetFields()
	n.Namespace = md[MetaNamespace].GetStringValue()
	if ls := md[MetaLabels].GetStructValue().GetFields(); len(ls) > 0 {
		n.Labels = make(map[string]string, len(ls))
		for k, v := range ls {
			if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
				n.Labels[k] = s.StringValue
			}
		}
	}
	for _, v := range md[MetaProviderPorts].GetListValue().GetValues() {
		if f, ok := v.GetKind().(*structpb.Value_NumberValue); ok && f.NumberValue >= 1 && f.NumberValue <= 65535 {
			n.Ports = append(n.Ports, int32(f.NumberValue))
		}
	}
	n.Ports = sortedPorts(n.Ports)
	return n
}
