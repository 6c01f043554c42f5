package main

import (
	"time"

	"github.com/stormgate/stormgate/admission"
	"github.com/stormgate/stormgate/proxy"
	sg "github.com/stormgate/stormgate/xds/stormgatev1"
)

// The sidecar maps the one settings schema onto each stage's own config value.

func toProxyConfig(s *sg.Settings) proxy.Config {
	ports := make([]uint16, 0, len(s.GetListener().GetInboundPorts()))
	for _, p := range s.GetListener().GetInboundPorts() {
		ports = append(ports, uint16(p))
	}
	policy := proxy.ReadonlyHold
	if s.GetDrain().GetReadonlyPolicy() == sg.ReadonlyPolicy_PROPAGATE {
		policy = proxy.ReadonlyPropagate
	}
	return proxy.Config{
		Upstream:       s.GetUpstream().GetAddress(),
		UpstreamConns:  int(s.GetUpstream().GetConnections()),
		ConnectTimeout: s.GetUpstream().GetConnectTimeout().AsDuration(),
		BackoffBase:    s.GetUpstream().GetBackoffBase().AsDuration(),
		BackoffMax:     s.GetUpstream().GetBackoffMax().AsDuration(),
		Warmup:         s.GetUpstream().GetWarmup().AsDuration(),
		HoldTimeout:    s.GetHold().GetTimeout().AsDuration(),
		// Settings for these arrive with the schema change that follows; until then the
		// shipped values.
		WriteTimeout:              10 * time.Second,
		MaxQueuedBytesPerUpstream: 8 << 20,
		FrameReadTimeout:          30 * time.Second,
		MaxBufferedBytes:          256 << 20,
		HoldMaxRequests:           int(s.GetHold().GetMaxRequests()),
		HoldMaxBytes:              int(s.GetHold().GetMaxBytes()),
		DownstreamIdleTimeout:     s.GetKeepalive().GetDownstreamIdleTimeout().AsDuration(),
		UpstreamInterval:          s.GetKeepalive().GetUpstreamInterval().AsDuration(),
		UpstreamJitter:            s.GetKeepalive().GetUpstreamJitter(),
		UpstreamMaxMissed:         int(s.GetKeepalive().GetUpstreamMaxMissed()),
		MaxFrameBytes:             int(s.GetLimits().GetMaxFrameBytes()) + 16,
		MaxInflightPerConn:        int(s.GetLimits().GetMaxInflightPerConnection()),
		MaxQueuedBytesPerConn:     int(s.GetLimits().GetMaxQueuedBytesPerConnection()),
		MaxRequestAge:             s.GetLimits().GetMaxRequestAge().AsDuration(),
		ReadonlyPolicy:            policy,
		DrainTimeout:              s.GetDrain().GetTimeout().AsDuration(),
		Transparent:               s.GetListener().GetTransparent(),
		InboundPorts:              ports,
	}
}

func toAdmissionConfig(s *sg.Settings) admission.Config {
	ports := make([]uint16, 0, len(s.GetListener().GetInboundPorts()))
	for _, p := range s.GetListener().GetInboundPorts() {
		ports = append(ports, uint16(p))
	}
	rate := s.GetAdmission().GetAcceptRate()
	return admission.Config{
		Address:           s.GetListener().GetAddress(),
		Backlog:           int(s.GetListener().GetBacklog()),
		AcceptRate:        rate,
		AcceptBurst:       int(s.GetAdmission().GetAcceptBurst()),
		MaxWait:           s.GetAdmission().GetMaxWait().AsDuration(),
		MaxConnections:    int(s.GetAdmission().GetMaxConnections()),
		MaxPending:        int(s.GetAdmission().GetMaxPending()),
		PerSourceFairness: s.GetAdmission().GetPerSourceFairness(),
		TCPNoDelay:        true,
		TCPQuickAck:       s.GetAdmission().GetTcpQuickack(),
		TCPFastOpen:       int(s.GetAdmission().GetTcpFastopen()),
		KeepAliveIdle:     s.GetAdmission().GetTcpKeepaliveIdle().AsDuration().Round(time.Second),
		Transparent:       s.GetListener().GetTransparent(),
		InboundPorts:      ports,
	}
}
