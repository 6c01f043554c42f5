package settings

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// TestEveryFieldReachesItsStage sets each schema field to a valid value other than
// its default and checks that exactly the stage that uses it sees the change (issue
// 10: nothing tested that a field reached its stage, and several zeros were
// silently replaced by defaults inside the stages).
func TestEveryFieldReachesItsStage(t *testing.T) {
	const (
		toProxy     = "proxy"
		toAdmission = "admission"
		toBoth      = "proxy+admission"
		toLog       = "log"
		toDrain     = "drain"
	)
	cases := map[string]struct {
		stage string
		set   func(s *sg.Settings)
	}{
		"listener.address":                       {toAdmission, func(s *sg.Settings) { s.Listener.Address = proto.String("127.0.0.1:20999") }},
		"listener.backlog":                       {toAdmission, func(s *sg.Settings) { s.Listener.Backlog = proto.Int32(128) }},
		"listener.transparent":                   {toBoth, func(s *sg.Settings) { s.Listener.Transparent = proto.Bool(true) }},
		"listener.inbound_ports":                 {toBoth, func(s *sg.Settings) { s.Listener.InboundPorts = []int32{20880, 20890} }},
		"admission.accept_rate":                  {toAdmission, func(s *sg.Settings) { s.Admission.AcceptRate = proto.Float64(100) }},
		"admission.accept_burst":                 {toAdmission, func(s *sg.Settings) { s.Admission.AcceptBurst = proto.Int32(7) }},
		"admission.max_connections":              {toAdmission, func(s *sg.Settings) { s.Admission.MaxConnections = proto.Int32(5) }},
		"admission.max_pending":                  {toAdmission, func(s *sg.Settings) { s.Admission.MaxPending = proto.Int32(5) }},
		"admission.max_wait":                     {toAdmission, func(s *sg.Settings) { s.Admission.MaxWait = dur(0) }},
		"admission.per_source_fairness":          {toAdmission, func(s *sg.Settings) { s.Admission.PerSourceFairness = proto.Bool(false) }},
		"admission.tcp_quickack":                 {toAdmission, func(s *sg.Settings) { s.Admission.TcpQuickack = proto.Bool(false) }},
		"admission.tcp_fastopen":                 {toAdmission, func(s *sg.Settings) { s.Admission.TcpFastopen = proto.Int32(16) }},
		"admission.tcp_keepalive_idle":           {toAdmission, func(s *sg.Settings) { s.Admission.TcpKeepaliveIdle = dur(0) }},
		"upstream.address":                       {toProxy, func(s *sg.Settings) { s.Upstream.Address = proto.String("127.0.0.1:20999") }},
		"upstream.connections":                   {toProxy, func(s *sg.Settings) { s.Upstream.Connections = proto.Int32(1) }},
		"upstream.connect_timeout":               {toProxy, func(s *sg.Settings) { s.Upstream.ConnectTimeout = dur(2 * time.Second) }},
		"upstream.backoff_base":                  {toProxy, func(s *sg.Settings) { s.Upstream.BackoffBase = dur(time.Millisecond) }},
		"upstream.backoff_max":                   {toProxy, func(s *sg.Settings) { s.Upstream.BackoffMax = dur(time.Second) }},
		"upstream.warmup":                        {toProxy, func(s *sg.Settings) { s.Upstream.Warmup = dur(time.Second) }},
		"upstream.write_timeout":                 {toProxy, func(s *sg.Settings) { s.Upstream.WriteTimeout = dur(0) }},
		"upstream.max_queued_bytes":              {toProxy, func(s *sg.Settings) { s.Upstream.MaxQueuedBytes = proto.Int32(1 << 20) }},
		"upstream.protocol":                      {toProxy, func(s *sg.Settings) { s.Upstream.Protocol = proto.String("triple") }},
		"upstream.large_request_bytes":           {toProxy, func(s *sg.Settings) { s.Upstream.LargeRequestBytes = proto.Int32(0) }},
		"hold.timeout":                           {toProxy, func(s *sg.Settings) { s.Hold.Timeout = dur(0) }},
		"hold.max_requests":                      {toProxy, func(s *sg.Settings) { s.Hold.MaxRequests = proto.Int32(0) }},
		"hold.max_bytes":                         {toProxy, func(s *sg.Settings) { s.Hold.MaxBytes = proto.Int32(0) }},
		"hold.not_executed_retries":              {toProxy, func(s *sg.Settings) { s.Hold.NotExecutedRetries = proto.Int32(0) }},
		"hold.not_executed_window":               {toProxy, func(s *sg.Settings) { s.Hold.NotExecutedWindow = dur(0) }},
		"hold.max_timeout":                       {toProxy, func(s *sg.Settings) { s.Hold.MaxTimeout = dur(0) }},
		"hold.deadline_margin":                   {toProxy, func(s *sg.Settings) { s.Hold.DeadlineMargin = dur(0) }},
		"hold.max_bytes_per_consumer":            {toProxy, func(s *sg.Settings) { s.Hold.MaxBytesPerConsumer = proto.Int32(0) }},
		"keepalive.downstream_idle_timeout":      {toProxy, func(s *sg.Settings) { s.Keepalive.DownstreamIdleTimeout = dur(0) }},
		"keepalive.upstream_interval":            {toProxy, func(s *sg.Settings) { s.Keepalive.UpstreamInterval = dur(time.Second) }},
		"keepalive.upstream_jitter":              {toProxy, func(s *sg.Settings) { s.Keepalive.UpstreamJitter = proto.Float64(0) }},
		"keepalive.upstream_max_missed":          {toProxy, func(s *sg.Settings) { s.Keepalive.UpstreamMaxMissed = proto.Int32(1) }},
		"keepalive.upstream_hung_timeout":        {toProxy, func(s *sg.Settings) { s.Keepalive.UpstreamHungTimeout = dur(0) }},
		"limits.max_frame_bytes":                 {toProxy, func(s *sg.Settings) { s.Limits.MaxFrameBytes = proto.Int32(1 << 20) }},
		"limits.max_inflight_per_connection":     {toProxy, func(s *sg.Settings) { s.Limits.MaxInflightPerConnection = proto.Int32(1) }},
		"limits.max_request_age":                 {toProxy, func(s *sg.Settings) { s.Limits.MaxRequestAge = dur(45 * time.Second) }},
		"limits.max_queued_bytes_per_connection": {toProxy, func(s *sg.Settings) { s.Limits.MaxQueuedBytesPerConnection = proto.Int32(64 << 10) }},
		"limits.frame_read_timeout":              {toProxy, func(s *sg.Settings) { s.Limits.FrameReadTimeout = dur(0) }},
		"limits.max_buffered_bytes":              {toProxy, func(s *sg.Settings) { s.Limits.MaxBufferedBytes = proto.Int32(1 << 20) }},
		"limits.max_queued_bytes_per_consumer":   {toProxy, func(s *sg.Settings) { s.Limits.MaxQueuedBytesPerConsumer = proto.Int32(0) }},
		"drain.readonly_policy":                  {toProxy, func(s *sg.Settings) { s.Drain.ReadonlyPolicy = sg.ReadonlyPolicy_PROPAGATE.Enum() }},
		"drain.timeout":                          {toProxy, func(s *sg.Settings) { s.Drain.Timeout = dur(0) }},
		"drain.min_duration":                     {toDrain, func(s *sg.Settings) { s.Drain.MinDuration = dur(0) }},
		"log.level":                              {toLog, func(s *sg.Settings) { s.Log.Level = proto.String("debug") }},
		"log.format":                             {toLog, func(s *sg.Settings) { s.Log.Format = proto.String("console") }},
		"metrics.max_methods":                    {toProxy, func(s *sg.Settings) { s.Metrics.MaxMethods = proto.Int32(0) }},
		"access_log.enabled":                     {toProxy, func(s *sg.Settings) { s.AccessLog.Enabled = proto.Bool(true) }},
		"access_log.failed":                      {toProxy, func(s *sg.Settings) { s.AccessLog.Failed = proto.Bool(false) }},
		"access_log.slow_threshold":              {toProxy, func(s *sg.Settings) { s.AccessLog.SlowThreshold = dur(0) }},
		"access_log.sample_rate":                 {toProxy, func(s *sg.Settings) { s.AccessLog.SampleRate = proto.Float64(0.5) }},
		"access_log.max_per_second":              {toProxy, func(s *sg.Settings) { s.AccessLog.MaxPerSecond = proto.Int32(7) }},
		"http2.max_concurrent_streams":           {toProxy, func(s *sg.Settings) { s.Http2.MaxConcurrentStreams = proto.Int32(1) }},
		"http2.initial_window_size":              {toProxy, func(s *sg.Settings) { s.Http2.InitialWindowSize = proto.Int32(1 << 20) }},
		"http2.max_header_list_size":             {toProxy, func(s *sg.Settings) { s.Http2.MaxHeaderListSize = proto.Int32(8 << 10) }},
	}
	base := Defaults()
	for _, f := range Fields() {
		c, ok := cases[f.Path]
		if !ok {
			t.Errorf("%s: no case here: add one with a valid value other than the default", f.Path)
			continue
		}
		t.Run(f.Path, func(t *testing.T) {
			s := Defaults()
			c.set(s)
			if err := Validate(s); err != nil {
				t.Fatalf("the test's value is invalid: %v", err)
			}
			if Equal(s, base) {
				t.Fatal("the test's value is the default")
			}
			changed := ""
			if !reflect.DeepEqual(ProxyConfig(s), ProxyConfig(base)) {
				changed = toProxy
			}
			if !reflect.DeepEqual(AdmissionConfig(s), AdmissionConfig(base)) {
				if changed != "" {
					changed += "+"
				}
				changed += toAdmission
			}
			if LogSettings(s) != LogSettings(base) {
				changed = toLog
			}
			if DrainSettings(s) != DrainSettings(base) {
				changed = toDrain
			}
			if changed != c.stage {
				t.Fatalf("changed the %q stage config; want %q", changed, c.stage)
			}
		})
	}
}

// TestZeroMeansWhatTheSchemaSays: the fields whose documented zero turns something
// off arrive at the stage as zero, not as a default (each was replaced before).
func TestZeroMeansWhatTheSchemaSays(t *testing.T) {
	s := Defaults()
	s.Keepalive.DownstreamIdleTimeout = dur(0)
	s.Hold.MaxRequests = proto.Int32(0)
	s.Hold.MaxBytes = proto.Int32(0)
	s.Hold.Timeout = dur(0)
	s.Drain.Timeout = dur(0)
	s.Drain.MinDuration = dur(0)
	s.Admission.MaxWait = dur(0)
	s.Limits.FrameReadTimeout = dur(0)
	s.Upstream.WriteTimeout = dur(0)
	if err := Validate(s); err != nil {
		t.Fatal(err)
	}
	p, a := ProxyConfig(s), AdmissionConfig(s)
	if DrainSettings(s).MinDuration != 0 {
		t.Fatal("drain.min_duration 0 replaced")
	}
	if p.DownstreamIdleTimeout != 0 || p.HoldMaxRequests != 0 || p.HoldMaxBytes != 0 || p.HoldTimeout != 0 ||
		p.DrainTimeout != 0 || p.FrameReadTimeout != 0 || p.WriteTimeout != 0 || a.MaxWait != 0 {
		t.Fatalf("zeros replaced: proxy %+v admission %+v", p, a)
	}
}

// TestWarnings: a consumer idle timeout below two Java heartbeats is valid but warned.
func TestWarnings(t *testing.T) {
	s := Defaults()
	if w := Warnings(s); len(w) != 0 {
		t.Fatalf("defaults warn: %v", w)
	}
	s.Keepalive.DownstreamIdleTimeout = dur(90 * time.Second)
	if w := Warnings(s); len(w) != 1 || w[0].Field != "keepalive.downstream_idle_timeout" {
		t.Fatalf("warnings %v", w)
	}
	s.Keepalive.DownstreamIdleTimeout = dur(0)
	if w := Warnings(s); len(w) != 0 {
		t.Fatalf("off is not a mistake: %v", w)
	}
	// A drain longer than Kubernetes waits before SIGKILL: 19 s + drain.timeout 10 s + the lingering
	// close's second fits in 30 s; half a second more does not.
	s.Drain.MinDuration = dur(19 * time.Second)
	if w := Warnings(s); len(w) != 0 {
		t.Fatalf("a drain of exactly 30 s warns: %v", w)
	}
	s.Drain.MinDuration = dur(19*time.Second + 500*time.Millisecond)
	if w := Warnings(s); len(w) != 1 || w[0].Field != "drain.min_duration" {
		t.Fatalf("warnings %v", w)
	}
}

// TestShippedFastOpenIsOff: admission's TestDefaultFastOpenQuietOnStockKernel checks
// that 0 does not warn on a stock kernel; this keeps 0 the shipped value.
func TestShippedFastOpenIsOff(t *testing.T) {
	if v := Defaults().GetAdmission().GetTcpFastopen(); v != 0 {
		t.Fatalf("admission.tcp_fastopen default %d; the admission test assumes 0", v)
	}
}
