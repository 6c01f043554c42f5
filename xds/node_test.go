package xds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stormgate/stormgate/settings"
)

// The node metadata a client reports, under the keys a control plane reads
// (controlplane.NodeInfoOf decodes them).
func TestNodeMetadata(t *testing.T) {
	in := NodeInfo{ID: "p-0.shop", Cluster: "east", Namespace: "shop",
		Labels: map[string]string{"app": "payment", "track": "canary"}, Ports: []int32{20880, 20881}}
	n := coreNode(t, in.node())
	md := n.GetMetadata().GetFields()
	ls := md[MetaLabels].GetStructValue().GetFields()
	ps := md[MetaProviderPorts].GetListValue().GetValues()
	if n.GetId() != in.ID || n.GetCluster() != "east" || md[MetaNamespace].GetStringValue() != "shop" ||
		ls["app"].GetStringValue() != "payment" || ls["track"].GetStringValue() != "canary" ||
		len(ps) != 2 || ps[0].GetNumberValue() != 20880 || ps[1].GetNumberValue() != 20881 {
		t.Fatalf("node sent: %v", n)
	}
	if in.String() != "p-0.shop cluster=east namespace=shop labels=app=payment,track=canary ports=20880,20881" {
		t.Errorf("String: %s", in)
	}
	if (NodeInfo{ID: "x"}).node().Metadata != nil {
		t.Errorf("no metadata when there is nothing to report")
	}
}

func TestReadLabelsFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "labels")
	// What the kubelet writes for a downward-API volume item with fieldRef metadata.labels.
	writeFile(t, p, "app=\"payment\"\npod-template-hash=\"7d9f\"\nnote=\"a \\\"quoted\\\" value\"\n")
	got, err := ReadLabelsFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if FormatLabels(got) != `app=payment,note=a "quoted" value,pod-template-hash=7d9f` {
		t.Errorf("got %v", got)
	}
	writeFile(t, p, "app=payment\n")
	if _, err := ReadLabelsFile(p); err == nil || !strings.Contains(err.Error(), "line 1: value of app: want a quoted string") {
		t.Errorf("unquoted value: %v", err)
	}
	if ls, err := ParseLabels(" app=payment, track=canary ,"); err != nil || FormatLabels(ls) != "app=payment,track=canary" {
		t.Errorf("ParseLabels: %v %v", ls, err)
	}
	if _, err := ParseLabels("app"); err == nil {
		t.Errorf("ParseLabels accepted a label without =")
	}
}

func TestProviderPorts(t *testing.T) {
	s := settings.Defaults()
	if got := ProviderPorts(s); len(got) != 1 || got[0] != 20880 {
		t.Errorf("upstream port: %v", got)
	}
	s.Listener.Transparent = ptr(true)
	s.Listener.InboundPorts = []int32{20881, 20880, 20881}
	if got := ProviderPorts(s); len(got) != 2 || got[0] != 20880 || got[1] != 20881 {
		t.Errorf("transparent: %v", got)
	}
}

func ptr[T any](v T) *T { return &v }

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
