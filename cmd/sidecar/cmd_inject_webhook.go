//go:build !dataplane

package main

import (
	"context"
	"errors"
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

	"github.com/stormgate/stormgate/inject"
	"github.com/stormgate/stormgate/inject/webhook"
	"github.com/stormgate/stormgate/xds/controlplane"
)

func newInjectWebhookCmd() *cobra.Command {
	var (
		listen, metrics, certFile, keyFile string
		logFormat                          string
		denyOnError                        bool
		flags                              injectFlags
	)
	cmd := &cobra.Command{
		Use:   "inject-webhook --listen :15443 --cert FILE --key FILE",
		Short: "Serve the mutating admission webhook that injects Stormgate into new pods",
		Long: `Serves AdmissionReview v1 over TLS on --listen at ` + webhook.Path + `: the Kubernetes API server sends
every new Pod that the MutatingWebhookConfiguration selects (deploy/inject-webhook.yaml: namespaces
labelled stormgate.io/inject=enabled, or pods labelled stormgate.io/inject=true), and the webhook
answers with a JSON patch that injects Stormgate exactly as 'sidecar inject' would (one code path:
the same flags, the same stormgate.io/* annotations on the pod, the same checks). A pod labelled or
annotated stormgate.io/inject: "false" is left alone; an injected pod is rebuilt only when the
version or settings differ.

A pod it cannot inject (an invalid annotation) is admitted unchanged, with a warning kubectl
shows, a log line and stormgate_webhook_reviews_total{result="error"}; --deny-on-error rejects it
instead, with the reason (the Helm chart sets it).

Pods of namespaces that enforce Pod Security baseline or restricted should be sent to
` + webhook.PodSecurityPath + `<level> (the chart's configuration does, by the namespace's
pod-security.kubernetes.io/enforce label): there a pod that would get the redirect init container
(root, NET_ADMIN) is refused with the reason and the way out, explicit-port mode
(stormgate.io/redirect: none, or --redirect none), which those levels admit.

Annotations on a Deployment's own metadata do not reach its pods: put them on the pod template.

--cert and --key are re-read when they change (cert-manager rotation needs no restart). The API
server verifies them with the configuration's caBundle. --metrics serves /metrics, /healthz and
/readyz over plain HTTP for probes and Prometheus.`,
		Example: `  sidecar inject-webhook --listen :15443 --cert /etc/webhook/tls.crt --key /etc/webhook/tls.key \
      --image registry.example/stormgate/sidecar:1.0.0 \
      --xds stormgate-control-plane.stormgate-system.svc:18000 \
      --xds-ca-secret stormgate-xds-client --xds-cert-secret stormgate-xds-client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if certFile == "" || keyFile == "" {
				return errors.New("--cert and --key are required: the API server only calls webhooks over TLS")
			}
			cfg, err := flags.config()
			if err != nil {
				return err
			}
			log, _, err := newLogger("info", logFormat)
			if err != nil {
				return err
			}
			defer log.Sync() //nolint:errcheck
			if cfg.Image == "" && version == inject.DefaultVersion {
				log.Warn(devImageWarning())
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			h, err := webhook.New(webhook.Config{Inject: cfg, DenyOnError: denyOnError}, log.Named("webhook"), reg)
			if err != nil {
				return fmt.Errorf("injection settings: %w", err)
			}
			tc, err := controlplane.TLS(controlplane.TLSConfig{Cert: certFile, Key: keyFile})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			mux := http.NewServeMux()
			mux.Handle(webhook.Path, h)
			mux.Handle(webhook.PodSecurityPath, h) // namespaces that enforce baseline or restricted
			hs := &http.Server{Handler: mux, TLSConfig: tc, ReadHeaderTimeout: 5 * time.Second,
				ErrorLog: zap.NewStdLog(log.Named("https"))}
			var (
				servers []*httpServer
				g       sync.WaitGroup // their goroutines
			)
			if metrics != "" {
				mux := http.NewServeMux()
				mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
				ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
				mux.HandleFunc("/healthz", ok)
				mux.HandleFunc("/readyz", ok)
				mln, err := net.Listen("tcp", metrics)
				if err != nil {
					ln.Close()
					return fmt.Errorf("--metrics %s: %w", metrics, err)
				}
				servers = append(servers, serveHTTP(&g, "metrics", mln, mux, log))
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			serveErr := make(chan error, 1)
			go func() { serveErr <- hs.ServeTLS(ln, "", "") }()
			log.Info("inject webhook serving", zap.Stringer("listen", ln.Addr()), zap.String("path", webhook.Path),
				zap.String("image", cfg.Image), zap.String("version", version), zap.Bool("deny_on_error", denyOnError))
			select {
			case <-ctx.Done():
				err = nil
			case err = <-serveErr:
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx) // in-flight reviews finish; the API server retries elsewhere meanwhile
			for _, s := range servers {
				s.shutdown(5 * time.Second)
			}
			g.Wait()
			log.Info("inject webhook stopped")
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", ":15443", "HTTPS address the API server calls")
	f.StringVar(&certFile, "cert", "", "TLS certificate chain (PEM) for --listen; required")
	f.StringVar(&keyFile, "key", "", "private key of --cert (PEM); required")
	f.StringVar(&metrics, "metrics", ":15090", "plain HTTP /metrics, /healthz, /readyz (empty: off)")
	f.StringVar(&logFormat, "log-format", "json", "json or console")
	f.BoolVar(&denyOnError, "deny-on-error", false, "reject pods that cannot be injected instead of admitting them without Stormgate")
	flags.register(f)
	return cmd
}
