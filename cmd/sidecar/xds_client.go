package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/xds"
)

// xdsNodeFlags are what `run` reports about itself to the control plane,
// which matches them against namespaces: and selectors: of its file.
type xdsNodeFlags struct {
	namespace, labels, labelsFile, cluster string
}

// Environment variables read when the flags are not set (the Kubernetes
// downward API fills POD_NAMESPACE; `sidecar inject` mounts the labels file).
const (
	envNamespace  = "POD_NAMESPACE"
	envLabels     = xds.EnvPodLabels
	envLabelsFile = "STORMGATE_POD_LABELS_FILE"
	envCluster    = "STORMGATE_CLUSTER"
)

func addXDSNodeFlags(cmd *cobra.Command, f *xdsNodeFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.namespace, "xds-namespace", "", "namespace reported in the xDS node metadata, for the control plane's namespaces: and selectors: (default: $"+envNamespace+")")
	fl.StringVar(&f.labels, "xds-labels", "", "labels reported in the xDS node metadata, app=payment,track=canary (default: $"+envLabels+")")
	fl.StringVar(&f.labelsFile, "xds-labels-file", "", "read the labels from a Kubernetes downward-API file (fieldRef metadata.labels); adds to --xds-labels (default: $"+envLabelsFile+")")
	fl.StringVar(&f.cluster, "xds-cluster", "", "cluster reported as the xDS node.cluster, for selectors matching cluster: (default: $"+envCluster+")")
}

// nodeInfo is what the sidecar reports: flags first, then the environment.
// Ports are the provider ports of the startup settings (newXDSClient).
func (f xdsNodeFlags) nodeInfo(id string, getenv func(string) string) (xds.NodeInfo, error) {
	or := func(flag, env string) string {
		if flag != "" {
			return flag
		}
		return getenv(env)
	}
	n := xds.NodeInfo{ID: id, Namespace: or(f.namespace, envNamespace), Cluster: or(f.cluster, envCluster)}
	labels, err := xds.ParseLabels(or(f.labels, envLabels))
	if err != nil {
		return n, fmt.Errorf("--xds-labels: %w", err)
	}
	if path := or(f.labelsFile, envLabelsFile); path != "" {
		fromFile, err := xds.ReadLabelsFile(path)
		if err != nil {
			return n, fmt.Errorf("--xds-labels-file: %w", err)
		}
		for k, v := range fromFile {
			labels[k] = v
		}
	}
	if len(labels) > 0 {
		n.Labels = labels
	}
	return n, nil
}

// splitAddresses reads --xds: one or more host:port, comma-separated.
func splitAddresses(s string) []string {
	var out []string
	for a := range strings.SplitSeq(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// newXDSClient builds the ADS client of `run` from its flags. It reports the
// provider ports of base (the startup settings) and the rejections to store;
// synced runs, with the version, after each response the sidecar ACKed.
func newXDSClient(f runFlags, base *sg.Settings, store *settings.Store, log *zap.Logger, reg prometheus.Registerer,
	synced func(version string)) (*xds.Client, error) {
	id, err := xds.NodeID(f.nodeID, os.Getenv)
	if err != nil {
		return nil, err
	}
	node, err := f.node.nodeInfo(id, os.Getenv)
	if err != nil {
		return nil, err
	}
	node.Ports = xds.ProviderPorts(base)
	cl, err := xds.NewClient(xds.ClientConfig{Addresses: splitAddresses(f.xdsAddr), Node: node,
		ResourceName: f.xdsResource, CA: f.xdsCA, Cert: f.xdsCert, Key: f.xdsKey, UserAgentVersion: version,
		OnResult: func(v string, nack error) {
			store.XDSResult(v, nack)
			if nack == nil {
				synced(v)
			}
		}}, log, reg)
	if err != nil {
		return nil, fmt.Errorf("--xds: %w", err)
	}
	return cl, nil
}
