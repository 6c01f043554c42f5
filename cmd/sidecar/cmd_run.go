package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/settings"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
	"github.com/stormgate/stormgate/transparent"
	"github.com/stormgate/stormgate/xds"
)

type runFlags struct {
	config        string
	metrics       string
	admin         string
	xdsAddr       string
	nodeID        string
	xdsResource   string
	xdsCA         string
	xdsCert       string
	xdsKey        string
	xdsWait       time.Duration
	node          xdsNodeFlags
	set           []string
	netpollBuffer int
	pollers       int
	upgradeBinary string
	preflight     bool
}

func newRunCmd() *cobra.Command { return runCmd(new(runFlags)) }

// runCmd is `sidecar run` parsing its flags into f.
func runCmd(f *runFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the sidecar in front of one Dubbo provider",
		Long: `Run Stormgate in front of one Dubbo 2 provider.

Consumers connect to --listen; Stormgate answers their heartbeats, multiplexes their
requests onto --upstream-conns connections to --upstream, holds requests while the
provider restarts, and paces connection storms.

Settings come from, lowest to highest precedence: built-in defaults, --config FILE
(YAML, the same schema as the xDS resource: see 'sidecar validate' and
docs/configuration.md), these flags (--set PATH=VALUE reaches any setting), and then
live pushes from --xds.

Endpoints:
  --metrics  /metrics (Prometheus), /healthz (process alive), /readyz (taking traffic; with
             --xds, only once the control plane's first settings are in force),
             /app-health/... (the application probes sidecar inject moved here, if any)
  --admin    /config_dump (active settings, version, where each field came from, the
             last rejected version), POST /drain, GET /logging (the level),
             POST /logging?level=debug (change it live), GET /version,
             GET|POST /upgrade (see 'sidecar upgrade'). Keep it on loopback.

Signals: SIGTERM or SIGINT drains gracefully: /readyz answers 503 and every consumer
gets READONLY at once, Stormgate keeps accepting and serving for drain.min_duration
(default 5s; a second signal skips it), then stops accepting, lets in-flight requests
finish up to drain.timeout, and exits 0. SIGHUP re-reads --config (and
these flags) and applies it live like an xDS push: all of it or, when any field is
invalid or cannot change live, none of it (logged with every problem). With --xds,
SIGHUP is ignored: the control plane owns the settings (docs/operations.md).
SIGUSR2 upgrades in place to --upgrade-binary (default: the path this process was
started from) without closing a connection, as 'sidecar upgrade' does.`,
		Example: `  # standalone, provider on 20880, consumers dial 20881
  sidecar run --upstream 127.0.0.1:20880 --listen 0.0.0.0:20881

  # settings from a file, live updates from a control plane
  sidecar run --config /etc/stormgate/stormgate.yaml --xds 127.0.0.1:18000 --node-id pod-a.default

  # Kubernetes sidecar: iptables (sidecar iptables) redirects inbound 20880 to 15006
  sidecar run --transparent --listen 0.0.0.0:15006

  # any setting by its path, as in the file (enums in any case, sizes with units)
  sidecar run --upstream 127.0.0.1:20880 --set hold.timeout=10s --set limits.max_frame_bytes=16MiB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSidecar(cmd, *f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "settings file (YAML, schema of docs/configuration.md)")
	for _, sf := range settings.RunFlags {
		v := &settingFlag{value: sf.Default(), kind: sf.Kind()}
		pf := fl.VarPF(v, sf.Name, "", sf.Usage+" ("+sf.Path+")")
		if v.kind == "bool" {
			pf.NoOptDefVal = "true" // --transparent alone
		}
	}
	fl.StringVar(&f.metrics, "metrics", "0.0.0.0:15090", "metrics listener: /metrics /healthz /readyz (empty: off)")
	fl.StringVar(&f.admin, "admin", "127.0.0.1:15000", "admin listener: /config_dump, POST /drain, /logging (empty: off)")
	fl.StringVar(&f.xdsAddr, "xds", "", "xDS control plane HOST:PORT (ADS over gRPC), or several replicas HOST:PORT,HOST:PORT (fails over between them); empty: no xDS")
	fl.StringVar(&f.nodeID, "node-id", "", "xDS node id (default: $POD_NAME.$POD_NAMESPACE)")
	fl.StringVar(&f.xdsResource, "xds-resource", xds.DefaultResourceName, "name of the ExtensionConfig resource carrying the settings")
	fl.StringVar(&f.xdsCA, "xds-ca", "", "CA bundle to verify the control plane (enables TLS)")
	fl.StringVar(&f.xdsCert, "xds-cert", "", "client certificate for mTLS to the control plane")
	fl.StringVar(&f.xdsKey, "xds-key", "", "client key for mTLS to the control plane")
	fl.DurationVar(&f.xdsWait, "xds-wait", time.Second, "with --xds: how long start-up waits for the control plane's first settings before dialling the provider with the startup ones (consumers wait in the accept queue meanwhile); 0: do not wait")
	fl.StringArrayVar(&f.set, "set", nil, "any setting by its path, written as in the settings file: --set hold.timeout=10s --set limits.max_frame_bytes=16MiB (repeatable; same layer as the flags above)")
	fl.IntVar(&f.netpollBuffer, "netpoll-buffer", proxy.DefaultNetpollBuffer, "initial input buffer per connection in bytes (grows on demand)")
	_ = fl.MarkHidden("netpoll-buffer")
	fl.IntVar(&f.pollers, "pollers", 0, "event loops running the data plane (netpoll pollers); 0: one per core (GOMAXPROCS). Fewer cost less CPU with many idle consumers and carry fewer requests/s (docs/operations.md, Sizing)")
	fl.StringVar(&f.upgradeBinary, "upgrade-binary", "", "binary SIGUSR2 (and 'sidecar upgrade' without --binary) upgrades to; default: the path this process was started from (replace the file, then signal)")
	fl.BoolVar(&f.preflight, "preflight", false, "check the flags and settings as run would, print a JSON report, exit (what an upgrade asks of the new binary); binds nothing")
	_ = fl.MarkHidden("preflight")
	addXDSNodeFlags(cmd, &f.node)
	return cmd
}

// startupSettings are the settings `run` starts with (defaults < file <
// flags), with the source of every field and the file they were read from.
type startupSettings struct {
	settings.Layered
	file *settings.SettingsFile // nil without --config
}

// explain names the file and line of each problem of err about a field the
// file set, one per indented line; nil stays nil.
func (s startupSettings) explain(err error) error {
	if err == nil {
		return nil
	}
	if s.file != nil {
		err = s.file.Annotate(err, s.Sources)
	}
	return problemsError{"invalid settings", err}
}

// readSettings merges defaults, the file and the flags that were set, and
// records where each field came from; it does not validate the result. Errors
// name the file and line.
func readSettings(cmd *cobra.Command, f runFlags) (startupSettings, error) {
	var ss startupSettings
	var fromFile *sg.Settings
	if f.config != "" {
		sf, err := settings.ReadSettingsFile(f.config)
		if err != nil {
			return ss, problemsError{"--config " + f.config, err}
		}
		ss.file, fromFile = sf, sf.Settings
	}
	over, err := flagSettings(cmd, f)
	if err != nil {
		return ss, err
	}
	ss.Layered = settings.MergeLayers(f.config, settings.Layer{Source: settings.SourceDefaults, Settings: settings.Defaults()},
		settings.Layer{Source: settings.SourceFile, Settings: fromFile}, settings.Layer{Source: settings.SourceFlag, Settings: over})
	return ss, nil
}

// buildSettings is readSettings, validated: what `run` starts with. With a
// validation error the (invalid) merged settings are returned too.
func buildSettings(cmd *cobra.Command, f runFlags) (settings.Layered, error) {
	ss, err := readSettings(cmd, f)
	if err != nil {
		return ss.Layered, err
	}
	return ss.Layered, ss.explain(settings.Validate(ss.Settings))
}

// settingFlag is the value of a flag of settings.RunFlags: kept as written, and decoded with
// the settings file's decoder when the flag is given (flagSettings).
type settingFlag struct{ value, kind string }

func (v *settingFlag) String() string     { return v.value }
func (v *settingFlag) Set(s string) error { v.value = s; return nil }
func (v *settingFlag) Type() string       { return v.kind }

// flagSettings returns the settings the given flags set: each flag and each --set PATH=VALUE is
// decoded by the settings file's own decoder (settings.ParseAssignments), so flags take what the file
// takes ("--log-level DEBUG", "--set limits.max_frame_bytes=16MiB"). A field given twice (by its
// flag and by --set) is refused.
func flagSettings(cmd *cobra.Command, f runFlags) (*sg.Settings, error) {
	var as []settings.Assignment
	for _, sf := range settings.RunFlags {
		fl := cmd.Flags().Lookup(sf.Name)
		if !fl.Changed {
			continue
		}
		v := fl.Value.String()
		if sf.Path == "listener.inbound_ports" {
			ports, err := transparent.ParsePorts(v)
			if err != nil {
				return nil, fmt.Errorf("--inbound-ports: %w", err)
			}
			v = "[" + transparent.FormatPorts(ports) + "]"
		}
		as = append(as, settings.Assignment{Path: sf.Path, Value: v})
	}
	for _, s := range f.set {
		a, ok := settings.ParseAssignment(s)
		if !ok {
			return nil, fmt.Errorf("--set %q: want PATH=VALUE, e.g. hold.timeout=10s", s)
		}
		as = append(as, a)
	}
	over, err := settings.ParseAssignments(as)
	if err != nil {
		return nil, problemsError{"flags (a setting given by its own flag and by --set is \"set twice\")", err}
	}
	return over, nil
}

// checkPollers refuses a --pollers value ConfigureNetpoll cannot use.
func checkPollers(n int) error {
	if n < 0 || n > proxy.MaxPollers {
		return fmt.Errorf("--pollers %d: want 0 (one per core, the default) or 1 to %d", n, proxy.MaxPollers)
	}
	return nil
}

func newLogger(level, format string) (*zap.Logger, zap.AtomicLevel, error) {
	cfg, err := loggerConfig(level, format)
	if err != nil {
		return nil, cfg.Level, err
	}
	l, err := cfg.Build()
	return l, cfg.Level, err
}

func loggerConfig(level, format string) (zap.Config, error) {
	var cfg zap.Config
	lv, err := zap.ParseAtomicLevel(strings.ToLower(level))
	if err != nil {
		return cfg, fmt.Errorf("log.level %q: must be debug, info, warn or error", level)
	}
	switch format {
	case "", "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
	default:
		return cfg, fmt.Errorf("log.format %q: must be json or console", format)
	}
	cfg.Level = lv
	// ISO-8601 UTC timestamps and durations with their unit ("1s"), in both formats.
	cfg.EncoderConfig.EncodeTime = func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
		enc.AppendString(t.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	}
	cfg.EncoderConfig.EncodeDuration = zapcore.StringDurationEncoder
	cfg.Sampling = nil
	cfg.DisableStacktrace = true // operators want one line per event; errors carry their cause
	return cfg, nil
}

// fieldsFrom lists, sorted, the fields whose value came from source.
func fieldsFrom(sources settings.FieldSources, source string) []string {
	var out []string
	for f, src := range sources {
		if src == source {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

// upstreamDesc says where requests go, for the start-up log line.
func upstreamDesc(s *sg.Settings) string {
	if s.GetListener().GetTransparent() {
		return fmt.Sprintf("127.0.0.1:<original port>, ports %v", s.GetListener().GetInboundPorts())
	}
	return s.GetUpstream().GetAddress()
}
