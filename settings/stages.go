package settings

import (
	"fmt"
	"time"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/proxy"
	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// The stages receive fully resolved values from here: every setting of the schema
// maps to exactly one stage field (TestEveryFieldReachesItsStage), its zero means
// what the schema says, and defaults exist only in Defaults. Pass complete settings
// (WithDefaults of a file or a push, validated).

// ProxyConfig is the data plane's part of s.
func ProxyConfig(s *sg.Settings) proxy.Config {
	policy := proxy.ReadonlyHold
	if s.GetDrain().GetReadonlyPolicy() == sg.ReadonlyPolicy_PROPAGATE {
		policy = proxy.ReadonlyPropagate
	}
	u, h, k, l := s.GetUpstream(), s.GetHold(), s.GetKeepalive(), s.GetLimits()
	return proxy.Config{
		Upstream:                  u.GetAddress(),
		UpstreamConns:             int(u.GetConnections()),
		ConnectTimeout:            u.GetConnectTimeout().AsDuration(),
		BackoffBase:               u.GetBackoffBase().AsDuration(),
		BackoffMax:                u.GetBackoffMax().AsDuration(),
		Warmup:                    u.GetWarmup().AsDuration(),
		WriteTimeout:              u.GetWriteTimeout().AsDuration(),
		MaxQueuedBytesPerUpstream: int(u.GetMaxQueuedBytes()),
		LargeRequestBytes:         int(u.GetLargeRequestBytes()),
		Protocols:                 protocols(u.GetProtocol()),
		HoldTimeout:               h.GetTimeout().AsDuration(),
		HoldMaxTimeout:            h.GetMaxTimeout().AsDuration(),
		DeadlineMargin:            h.GetDeadlineMargin().AsDuration(),
		HoldMaxRequests:           int(h.GetMaxRequests()),
		HoldMaxBytes:              int(h.GetMaxBytes()),
		HoldMaxBytesPerConsumer:   int(h.GetMaxBytesPerConsumer()),
		NotExecutedRetries:        int(h.GetNotExecutedRetries()),
		NotExecutedWindow:         h.GetNotExecutedWindow().AsDuration(),
		DownstreamIdleTimeout:     k.GetDownstreamIdleTimeout().AsDuration(),
		UpstreamInterval:          k.GetUpstreamInterval().AsDuration(),
		UpstreamJitter:            k.GetUpstreamJitter(),
		UpstreamMaxMissed:         int(k.GetUpstreamMaxMissed()),
		UpstreamHungTimeout:       k.GetUpstreamHungTimeout().AsDuration(),
		MaxFrameBytes:             int(l.GetMaxFrameBytes()) + frameHeader, // the schema counts the body
		MaxInflightPerConn:        int(l.GetMaxInflightPerConnection()),
		MaxQueuedBytesPerConn:     int(l.GetMaxQueuedBytesPerConnection()),
		MaxQueuedBytesPerConsumer: int(l.GetMaxQueuedBytesPerConsumer()),
		MaxRequestAge:             l.GetMaxRequestAge().AsDuration(),
		FrameReadTimeout:          l.GetFrameReadTimeout().AsDuration(),
		MaxBufferedBytes:          int64(l.GetMaxBufferedBytes()),
		ReadonlyPolicy:            policy,
		DrainTimeout:              s.GetDrain().GetTimeout().AsDuration(),
		Transparent:               s.GetListener().GetTransparent(),
		InboundPorts:              inboundPorts(s),
		MaxMethods:                int(s.GetMetrics().GetMaxMethods()),
		AccessLog: proxy.AccessLogConfig{
			Enabled:       s.GetAccessLog().GetEnabled(),
			Failed:        s.GetAccessLog().GetFailed(),
			SlowThreshold: s.GetAccessLog().GetSlowThreshold().AsDuration(),
			SampleRate:    s.GetAccessLog().GetSampleRate(),
			MaxPerSecond:  int(s.GetAccessLog().GetMaxPerSecond()),
		},
		HTTP2: proxy.HTTP2Config{
			MaxConcurrentStreams: int(s.GetHttp2().GetMaxConcurrentStreams()),
			InitialWindowSize:    int(s.GetHttp2().GetInitialWindowSize()),
			MaxHeaderListSize:    int(s.GetHttp2().GetMaxHeaderListSize()),
		},
	}
}

// protocols is upstream.protocol as the proxy's set of protocols.
func protocols(p string) proxy.Protocols {
	switch p {
	case "triple":
		return proxy.ProtoTriple
	case "both":
		return proxy.ProtoDubbo | proxy.ProtoTriple
	}
	return proxy.ProtoDubbo
}

// frameHeader is the Dubbo header, which limits.max_frame_bytes does not count.
const frameHeader = 16

// AdmissionConfig is the listener's and the accept pacing's part of s.
func AdmissionConfig(s *sg.Settings) admission.Config {
	a := s.GetAdmission()
	return admission.Config{
		Address:           s.GetListener().GetAddress(),
		Backlog:           int(s.GetListener().GetBacklog()),
		AcceptRate:        a.GetAcceptRate(),
		AcceptBurst:       int(a.GetAcceptBurst()),
		MaxWait:           a.GetMaxWait().AsDuration(),
		MaxConnections:    int(a.GetMaxConnections()),
		MaxPending:        int(a.GetMaxPending()),
		PerSourceFairness: a.GetPerSourceFairness(),
		TCPNoDelay:        true, // not a setting: Dubbo frames are small and latency-bound
		TCPQuickAck:       a.GetTcpQuickack(),
		TCPFastOpen:       int(a.GetTcpFastopen()),
		KeepAliveIdle:     a.GetTcpKeepaliveIdle().AsDuration().Round(time.Second),
		Transparent:       s.GetListener().GetTransparent(),
		InboundPorts:      inboundPorts(s),
	}
}

// DrainConfig is the part of s that the sidecar's own shutdown reads when it
// starts (SIGTERM, POST /drain): live, like every drain setting.
type DrainConfig struct {
	// MinDuration is how long the sidecar keeps accepting and serving after it
	// announced the drain (/readyz 503, READONLY), before accepting stops.
	MinDuration time.Duration
}

// DrainSettings is the shutdown sequence's part of s (drain.timeout belongs to
// the proxy, which waits for its requests in flight).
func DrainSettings(s *sg.Settings) DrainConfig {
	return DrainConfig{MinDuration: s.GetDrain().GetMinDuration().AsDuration()}
}

// LogConfig is the logger's part of s: level (live) and format (start only).
type LogConfig struct{ Level, Format string }

// LogSettings is the logger's part of s.
func LogSettings(s *sg.Settings) LogConfig {
	return LogConfig{Level: s.GetLog().GetLevel(), Format: s.GetLog().GetFormat()}
}

func inboundPorts(s *sg.Settings) []uint16 {
	ports := make([]uint16, 0, len(s.GetListener().GetInboundPorts()))
	for _, p := range s.GetListener().GetInboundPorts() {
		ports = append(ports, uint16(p))
	}
	return ports
}

// Warnings lists settings that are valid but probably not what the operator wants,
// each saying why (logged at start and on each change, printed by validate).
func Warnings(s *sg.Settings) Problems {
	var ps Problems
	if d := s.GetKeepalive().GetDownstreamIdleTimeout().AsDuration(); d > 0 && d < 2*javaHeartbeat {
		ps = append(ps, Problem{Field: "keepalive.downstream_idle_timeout", Message: fmt.Sprintf(
			"%s is below twice Java Dubbo's default consumer heartbeat (%s): idle but healthy consumers will be "+
				"closed between heartbeats and reconnect; use at least %s, or 0 to turn it off",
			fmtDur(d), fmtDur(javaHeartbeat), fmtDur(2*javaHeartbeat))})
	}
	d := s.GetDrain()
	// The drain's lingering close after drain.timeout adds at most proxy.DrainLingerMin.
	if total := d.GetMinDuration().AsDuration() + d.GetTimeout().AsDuration() + proxy.DrainLingerMin; total > kubeGrace {
		ps = append(ps, Problem{Field: "drain.min_duration", Message: fmt.Sprintf(
			"with drain.timeout and the closing second a drain can take %s, more than Kubernetes' default terminationGracePeriodSeconds (%s): "+
				"raise the pod's terminationGracePeriodSeconds above %s, or the kubelet kills the sidecar mid-drain",
			fmtDur(total), fmtDur(kubeGrace), fmtDur(total))})
	}
	return ps
}

// kubeGrace is Kubernetes' default terminationGracePeriodSeconds.
const kubeGrace = 30 * time.Second

// javaHeartbeat is the heartbeat interval of a Java Dubbo consumer by default.
const javaHeartbeat = 60 * time.Second
