//go:build !dataplane

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/stormgate/stormgate/inject"
	"github.com/stormgate/stormgate/settings"
	"github.com/stormgate/stormgate/transparent"
)

func newInjectCmd() *cobra.Command {
	var (
		file  string
		quiet bool
		flags injectFlags
	)
	cmd := &cobra.Command{
		Use:   "inject -f FILE|-",
		Short: "Print a Kubernetes manifest with the Stormgate sidecar injected",
		Long: `Reads Deployment, StatefulSet and Pod manifests (YAML; several documents separated by ---
are fine) and prints them with Stormgate added to each pod:

  init container  stormgate-init: 'sidecar iptables' redirects the inbound Dubbo ports to the proxy
                  port, IPv4 and IPv6 (nftables over netlink; runs as root with CAP_NET_ADMIN only)
  container       stormgate: 'sidecar run --transparent', user 1337, read-only root filesystem, no
                  capabilities, liveness /healthz and readiness /readyz on the metrics port
  probes          the application's tcpSocket/httpGet probes on redirected ports now go through
                  Stormgate's /app-health/..., which runs them against the provider itself
  annotations     stormgate.io/injected: <version>; prometheus.io/scrape, prometheus.io/port,
                  prometheus.io/path for Stormgate's metrics unless the pod has its own (kept:
                  Stormgate's are on the port named sg-metrics)

Both containers run one image: by default stormgate/sidecar:<this binary's version>.

Other documents are printed unchanged. Injecting an injected manifest changes nothing when the
version and settings are the same; with a newer sidecar binary (or changed annotations or flags)
Stormgate's part is rebuilt, so the kubectl pipe below also upgrades.
Flags set the defaults; stormgate.io/* annotations on a pod template (or its workload) override
them per workload: inbound-ports (numbers or container port names), proxy-port, metrics-port,
upstream-conns, xds-address, xds-ca-secret, xds-cert-secret, log-level, image, init-image,
cpu-request, memory-request, cpu-limit, memory-limit, native-sidecar, backlog-sysctls, and
inject: "false" to opt out; and any setting by its path, stormgate.io/<section>-<field>
(stormgate.io/hold-timeout: 10s, stormgate.io/limits-max-frame-bytes: 16MiB; the sidecar gets
--set). Values are read and range-checked by the sidecar's own settings decoder; an unknown
stormgate.io/ annotation is an error ("did you mean"). See docs/kubernetes.md.

The listen backlog: a pod's network namespace has net.core.somaxconn 4096. --backlog-sysctls
(annotation backlog-sysctls: "true") sets it and net.ipv4.tcp_max_syn_backlog to
listener.backlog (the kubelet must allow these unsafe sysctls); unless that or "false" is said,
inject warns.

Control plane traffic is plaintext unless --xds-ca-secret (TLS) and --xds-cert-secret (mTLS)
name the Secrets to mount; inject warns when a control plane off the pod is reached in plaintext.

What was done to each document is reported on standard error.`,
		Example: `  sidecar inject -f deployment.yaml > deployment.injected.yaml
  kubectl get deploy provider -o yaml | sidecar inject -f - | kubectl apply -f -
  sidecar inject -f app.yaml --image registry.example/stormgate/sidecar:1.0 --inbound-ports 20880,20881
  sidecar inject -f app.yaml --xds stormgate-control-plane.stormgate-system.svc:18000 \
      --xds-ca-secret stormgate-xds-client --xds-cert-secret stormgate-xds-client`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return errors.New("no input: give -f FILE, or -f - to read standard input")
			}
			in, err := readManifest(cmd.InOrStdin(), file)
			if err != nil {
				return err
			}
			cfg, err := flags.config()
			if err != nil {
				return err
			}
			if cfg.Image == "" && version == inject.DefaultVersion && !quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "inject: warning: %s\n", devImageWarning())
			}
			out, results, err := inject.Manifest(in, cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			if !quiet {
				errw := cmd.ErrOrStderr()
				for _, r := range results {
					if r.Kind != "" {
						fmt.Fprintf(errw, "inject: %s\n", r)
					}
					for _, w := range r.Warnings {
						fmt.Fprintf(errw, "inject: warning: document %d: %s\n", r.Doc, w)
					}
				}
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "filename", "f", "", "manifest to read; - for standard input")
	flags.register(f)
	f.BoolVarP(&quiet, "quiet", "q", false, "do not report what was done to each document")
	return cmd
}

func readManifest(stdin io.Reader, file string) ([]byte, error) {
	if file == "-" {
		return io.ReadAll(stdin)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil, fmt.Errorf("%s is empty", file)
	}
	return b, nil
}

// injectFlags are the injection settings `sidecar inject` and `sidecar inject-webhook` share.
type injectFlags struct {
	cfg     inject.Config
	inbound string
	set     []string
	backlog bool
	flags   *pflag.FlagSet
}

func (fl *injectFlags) register(f *pflag.FlagSet) {
	cfg := &fl.cfg
	f.StringVar(&cfg.Image, "image", "", "Stormgate image, for both containers; default "+inject.DefaultImage(version)+" (annotation "+inject.AnnotationImage+")")
	f.StringVar(&cfg.InitImage, "init-image", "", "image of the init container; default the --image (annotation "+inject.AnnotationInitImage+")")
	f.StringVar(&fl.inbound, "inbound-ports", "", fmt.Sprintf("provider ports to redirect, comma separated; default %d (annotation %s)", inject.DefaultInboundPort, inject.AnnotationInboundPorts))
	f.Uint16Var(&cfg.ProxyPort, "proxy-port", inject.DefaultProxyPort, "transparent listener port (annotation "+inject.AnnotationProxyPort+")")
	f.Uint16Var(&cfg.MetricsPort, "metrics-port", inject.DefaultMetricsPort, "metrics, /healthz and /readyz port (annotation "+inject.AnnotationMetricsPort+")")
	f.IntVar(&cfg.UpstreamConns, "upstream-conns", 0, "connections to the provider per port; 0 keeps sidecar run's default (annotation "+inject.AnnotationUpstreamConns+")")
	f.StringVar(&cfg.XDSAddress, "xds", "", "control plane host:port; each pod's node id is POD_NAME.POD_NAMESPACE (annotation "+inject.AnnotationXDSAddress+")")
	f.StringVar(&cfg.XDSCASecret, "xds-ca-secret", "", "Secret whose ca.crt verifies the control plane: TLS (annotation "+inject.AnnotationXDSCASecret+")")
	f.StringVar(&cfg.XDSCertSecret, "xds-cert-secret", "", "kubernetes.io/tls Secret with the sidecar's client certificate: mTLS (annotation "+inject.AnnotationXDSCertSecret+")")
	f.StringVar(&cfg.LogLevel, "log-level", "", "sidecar log level; empty keeps the default (annotation "+inject.AnnotationLogLevel+")")
	f.StringVar(&cfg.Redirect, "redirect", inject.RedirectInitContainer, fmt.Sprintf("how consumers reach Stormgate: %s (init container with NET_ADMIN redirects the inbound ports; needs Pod Security privileged) or %s (explicit port: consumers connect to --proxy-port; admitted at restricted) (annotation %s)",
		inject.RedirectInitContainer, inject.RedirectNone, inject.AnnotationRedirect))
	f.BoolVar(&cfg.NativeSidecar, "native-sidecar", false, "run Stormgate as a native sidecar (restartPolicy: Always init container, Kubernetes >= 1.29) (annotation "+inject.AnnotationNativeSidecar+")")
	f.BoolVar(&fl.backlog, "backlog-sysctls", false, "set the pod's net.core.somaxconn and net.ipv4.tcp_max_syn_backlog to listener.backlog (unsafe sysctls: the kubelet must allow them); =false accepts a pod's 4096 without a warning (annotation "+inject.AnnotationBacklogSysctls+")")
	f.StringArrayVar(&fl.set, "set", nil, "a setting of every injected sidecar, PATH=VALUE as sidecar run --set takes it: --set hold.timeout=10s (repeatable; annotation stormgate.io/<section>-<field>, e.g. stormgate.io/hold-timeout)")
	fl.flags = f
}

// config returns the injection settings the flags describe, stamped with this binary's version.
func (fl *injectFlags) config() (inject.Config, error) {
	cfg := fl.cfg
	if fl.inbound != "" {
		ports, err := transparent.ParsePorts(fl.inbound)
		if err != nil {
			return cfg, fmt.Errorf("--inbound-ports: %w", err)
		}
		cfg.InboundPorts = ports
	}
	for _, s := range fl.set {
		a, ok := settings.ParseAssignment(s)
		if !ok {
			return cfg, fmt.Errorf("--set %q: want PATH=VALUE, e.g. hold.timeout=10s", s)
		}
		cfg.Settings = append(cfg.Settings, a)
	}
	if fl.flags != nil && fl.flags.Changed("backlog-sysctls") {
		cfg.BacklogSysctls = &fl.backlog
	}
	cfg.Version = version
	return cfg, nil
}

func devImageWarning() string {
	return fmt.Sprintf("this sidecar binary has no release version, so the default image is %s, "+
		"which no registry has: pass --image (make image builds and loads one)", inject.DefaultImage(version))
}
