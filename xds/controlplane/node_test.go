package controlplane

import (
	"testing"

	"github.com/stormgate/stormgate/xds"
)

// The control plane reads back the node metadata a sidecar reports; nodes
// that differ only by id are one class.
func TestNodeInfoOf(t *testing.T) {
	in := xds.NodeInfo{ID: "p-0.shop", Cluster: "east", Namespace: "shop",
		Labels: map[string]string{"app": "payment", "track": "canary"}, Ports: []int32{20881, 20880, 20881}}
	out := NodeInfoOf(coreNode(in))
	if out.String() != "p-0.shop cluster=east namespace=shop labels=app=payment,track=canary ports=20880,20881" {
		t.Fatalf("got %s", out)
	}
	other := out
	other.ID = "p-1.shop"
	if classKey(other) != classKey(out) {
		t.Errorf("the id must not be part of the class")
	}
	other.Labels = map[string]string{"app": "payment"}
	if classKey(other) == classKey(out) {
		t.Errorf("labels must be part of the class")
	}
}
