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
range, and the previous config keeps being served. The file is re-read every 500 ms.`,
		Example: "  sidecar control-plane --listen 127.0.0.1:18000 --config examples/control-plane.yaml",
		Args:    cobra.NoArgs,
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
			cp, err := xds.NewControlPlane(xds.ControlPlaneConfig{Config: config, ResourceName: resource}, log, reg)
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
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&logFormat, "log-format", "json", "json or console (json, like sidecar run: one object per line for log collectors)")
	return cmd
}
