//go:build !dataplane

package main

import (
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/xds"
	"github.com/stormgate/stormgate/xds/controlplane"
)

func newControlPlaneCmd() *cobra.Command {
	var (
		listen, config, resource, metrics string
		logLevel, logFormat               string
		tlsCfg                            controlplane.TLSConfig
	)
	cmd := &cobra.Command{
		Use:   "control-plane --listen ADDR --config FILE|DIR",
		Short: "Reference xDS control plane: serves Settings to sidecars by namespace, labels or node id, pushes on change",
		Long: `Serves Stormgate settings over ADS (go-control-plane server + snapshot cache) as a
TypedExtensionConfig resource. The config file (or every *.yaml in DIR) has four levels,
each any subset of the sidecar settings file, merged in this order (later wins):

  default:      every node
  namespaces:   namespace -> settings, for nodes reporting that namespace
  selectors:    list of {name, match: {namespace, cluster, port, labels}, settings};
                a more specific selector (its match has all of the other's conditions) wins
  nodes:        node id -> settings, for that one node

Sidecars report their namespace, labels, cluster and provider ports in the xDS node
metadata ('sidecar run --xds-namespace/--xds-labels/--xds-labels-file/--xds-cluster';
'sidecar inject' wires them from the pod). Each node's connection, ACKs and NACKs are
logged with the entries that apply to it ("settings_from"); a node that matches nothing
specific is logged as getting the default.

The config is validated before it is published (the same checks as 'sidecar validate'):
a bad edit is logged with the file, line, field and allowed range, the previous config
keeps being served, and stormgate_control_plane_config_valid drops to 0. The files are
re-read every 500 ms.

Replicas need no coordination: run several reading the same files (one ConfigMap) and
give sidecars all their addresses (--xds a:18000,b:18000) or one Service in front.

--metrics serves /metrics (stormgate_control_plane_*, process and Go runtime) and
/nodes (JSON: every connected node, what it reported, which entries apply, the version
served and ACKed; ?from=selectors.NAME or ?rejecting=1 to filter).
TLS: --cert and --key serve TLS (sidecars verify it with 'sidecar run --xds-ca'); adding
--client-ca requires every sidecar to present a certificate signed by that CA (mutual TLS,
'sidecar run --xds-cert --xds-key'). The files are re-read when they change, so a rotated
certificate is served without a restart. Without --cert the control plane is plaintext.`,
		Example: `  sidecar control-plane --listen 127.0.0.1:18000 --config examples/control-plane.yaml --metrics 127.0.0.1:18001
  sidecar validate examples/control-plane.yaml        # the checks the control plane runs
  curl -s 127.0.0.1:18001/nodes?from=selectors.payment-canary
  sidecar control-plane --listen :18000 --config /etc/stormgate/control-plane.yaml \
      --cert /etc/tls/tls.crt --key /etc/tls/tls.key --client-ca /etc/tls/ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if config == "" {
				return fmt.Errorf("--config FILE|DIR is required")
			}
			log, _, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			if err := registerBuildInfo(reg); err != nil { // which build serves; lets StormgateFileDescriptorsLow see it
				return err
			}
			cpCfg := controlplane.Config{Config: config, ResourceName: resource}
			switch {
			case tlsCfg.Cert != "" || tlsCfg.Key != "":
				opt, err := controlplane.Credentials(tlsCfg)
				if err != nil {
					return err
				}
				cpCfg.ServerOptions = append(cpCfg.ServerOptions, opt)
				log.Info("control plane TLS", zap.String("cert", tlsCfg.Cert), zap.Bool("client_certificates_required", tlsCfg.ClientCA != ""))
			case tlsCfg.ClientCA != "":
				return fmt.Errorf("--client-ca needs --cert and --key: mutual TLS is TLS first")
			}
			cp, err := controlplane.New(cpCfg, log, reg)
			if err != nil {
				return fmt.Errorf("--config %s:\n%w", config, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if metrics != "" {
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
				mux.Handle("/nodes", cp.NodesHandler())
				ln, err := net.Listen("tcp", metrics)
				if err != nil {
					return fmt.Errorf("--metrics %s: %w", metrics, err)
				}
				var g sync.WaitGroup
				defer g.Wait()
				defer serveHTTP(&g, "metrics", ln, mux, log).shutdown(time.Second)
			}
			err = cp.Run(ctx, listen)
			log.Info("control plane stopped", zap.Error(err))
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", "127.0.0.1:18000", "gRPC listen address")
	fl.StringVar(&config, "config", "", "control-plane YAML file, or a directory of them")
	fl.StringVar(&resource, "resource-name", xds.DefaultResourceName, "TypedExtensionConfig name served (sidecars ask for the same)")
	fl.StringVar(&metrics, "metrics", "", "serve Prometheus /metrics and /nodes on this address (off when empty)")
	fl.StringVar(&tlsCfg.Cert, "cert", "", "serve TLS with this certificate chain (PEM); needs --key")
	fl.StringVar(&tlsCfg.Key, "key", "", "private key of --cert (PEM)")
	fl.StringVar(&tlsCfg.ClientCA, "client-ca", "", "require client certificates signed by this CA (PEM): mutual TLS")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&logFormat, "log-format", "json", "json or console (json, like sidecar run: one object per line for log collectors)")
	return cmd
}
