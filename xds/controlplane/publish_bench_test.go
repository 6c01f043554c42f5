package controlplane

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/stormgate/stormgate/xds"
	"github.com/stormgate/stormgate/xds/controlplane/cpfile"
)

// BenchmarkPublish times what the control plane does for a change that
// affects every one of 5,000 connected nodes (10 apps x 5 namespaces, as
// stormbench xds-fleet), up to handing each node's new snapshot to the
// cache: with snapshots shared per distinct settings (what runs), and with
// one snapshot built per node (what ran before). Marshalling each response
// and the network are the same in both and not included.
//
//	go test -run=NONE -bench=Publish -benchmem ./xds/
func BenchmarkPublish(b *testing.B) {
	for _, perNode := range []bool{false, true} {
		name := "shared"
		if perNode {
			name = "per-node"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "cp.yaml")
			file := func(iv int) *cpfile.File {
				text := fmt.Sprintf("default:\n  keepalive: { upstream_interval: %ds }\nnamespaces:\n  ns-0: { hold: { timeout: 2s } }\nselectors:\n", 20+iv%40)
				for a := range 10 {
					text += fmt.Sprintf("  - name: app-%d\n    match: { labels: { app: app-%d } }\n    settings: { admission: { accept_rate: %d } }\n", a, a, 3000+a)
				}
				if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
					b.Fatal(err)
				}
				_, f, err := cpfile.Read(path)
				if err != nil {
					b.Fatal(err)
				}
				return f
			}
			file(0)
			cp, err := New(Config{Config: path}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			cp.perNodeSnapshots = perNode
			cp.mu.Lock()
			for i := range 5000 {
				ns := fmt.Sprintf("ns-%d", i/10%5)
				n := xds.NodeInfo{ID: fmt.Sprintf("fleet-%05d.%s", i, ns), Namespace: ns,
					Labels: map[string]string{"app": fmt.Sprintf("app-%d", i%10), "pod-template-hash": "5d8f7c9b4"}}
				st := &cpStream{}
				cp.streams[int64(i)] = st
				st.node = cp.connectLocked(st, &discovery.DiscoveryRequest{Node: coreNode(n), ResourceNames: []string{xds.DefaultResourceName}})
			}
			files := []*cpfile.File{file(1), file(2)}
			b.ResetTimer()
			for i := range b.N {
				cp.publishLocked(context.Background(), files[i%2])
			}
			b.StopTimer()
			cp.mu.Unlock()
		})
	}
}
