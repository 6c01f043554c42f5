package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stormgate/stormgate/xds"
)

func newControlPlaneCmd() *cobra.Command {
	var (
		listen, config, resource, metrics string
		logLevel, logFormat               string
		tlsCfg                            xds.ServerTLSConfig
	)
	cmd := &cobra.Command{
		Use:   "control-plane --listen ADDR --config FILE|DIR",
		Short: "Reference xDS control plane: serves per-node Settings from YAML and pushes on change",
		Long: `Serves Stormgate settings over ADS (go-control-plane server + snapshot cache) as a
TypedExtensionConfig resource. The config file (or every *.yaml in DIR) has:

  default:   settings for every node (any subset of the sidecar settings file)
  nodes:     node id -> settings merged over default

Each sidecar merges what it is served over its own startup settings. The config is
validated before it is published: a bad edit is logged with the field and the allowed
range, and the previous config keeps being served. The file is re-read every 500 ms.

TLS: --cert and --key serve TLS (sidecars verify it with 'sidecar run --xds-ca'); adding
--client-ca requires every sidecar to present a certificate signed by that CA (mutual TLS,
'sidecar run --xds-cert --xds-key'). The files are re-read when they change, so a rotated
certificate is served without a restart. Without --cert the control plane is plaintext.`,
		Example: `  sidecar control-plane --listen 127.0.0.1:18000 --config examples/control-plane.yaml
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
			cpCfg := xds.ControlPlaneConfig{Config: config, ResourceName: resource}
			switch {
			case tlsCfg.Cert != "" || tlsCfg.Key != "":
				opt, err := xds.ServerCredentials(tlsCfg)
				if err != nil {
					return err
				}
				cpCfg.ServerOptions = append(cpCfg.ServerOptions, opt)
				log.Info("control plane TLS", zap.String("cert", tlsCfg.Cert), zap.Bool("client_certificates_required", tlsCfg.ClientCA != ""))
			case tlsCfg.ClientCA != "":
				return fmt.Errorf("--client-ca needs --cert and --key: mutual TLS is TLS first")
			}
			cp, err := xds.NewControlPlane(cpCfg, log, reg)
			if err != nil {
				return fmt.Errorf("--config %s:\n%w", config, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			if metrics != "" {
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
				ln, err := net.Listen("tcp", metrics)
				if err != nil {
					return fmt.Errorf("--metrics %s: %w", metrics, err)
				}
				hs := serveHTTP("metrics", ln, mux, log)
				defer hs.Shutdown(context.Background()) //nolint:errcheck
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
	fl.StringVar(&metrics, "metrics", "", "serve Prometheus /metrics on this address (off when empty)")
	fl.StringVar(&tlsCfg.Cert, "cert", "", "serve TLS with this certificate chain (PEM); needs --key")
	fl.StringVar(&tlsCfg.Key, "key", "", "private key of --cert (PEM)")
	fl.StringVar(&tlsCfg.ClientCA, "client-ca", "", "require client certificates signed by this CA (PEM): mutual TLS")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&logFormat, "log-format", "console", "json or console")
	return cmd
}
