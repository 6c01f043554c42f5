package settings

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Defaults returns a fresh copy of the built-in settings: every field set.
// It is the one place defaults live; the flags, the docs and /config_dump
// all read them from here.
func Defaults() *sg.Settings {
	return &sg.Settings{
		Listener: &sg.Listener{
			Address:      proto.String("0.0.0.0:20881"),
			Backlog:      proto.Int32(65535),
			Transparent:  proto.Bool(false),
			InboundPorts: []int32{20880},
		},
		Admission: &sg.Admission{
			AcceptRate:        proto.Float64(5000),
			AcceptBurst:       proto.Int32(500),
			MaxConnections:    proto.Int32(100000),
			MaxPending:        proto.Int32(10000),
			MaxWait:           dur(time.Second),
			PerSourceFairness: proto.Bool(true),
			TcpQuickack:       proto.Bool(true),
			TcpFastopen:       proto.Int32(0), // off: Dubbo consumers do not send TFO SYNs (docs/operations.md)
			TcpKeepaliveIdle:  dur(60 * time.Second),
		},
		Upstream: &sg.Upstream{
			Address:        proto.String("127.0.0.1:20880"),
			Connections:    proto.Int32(4),
			ConnectTimeout: dur(time.Second),
			BackoffBase:    dur(50 * time.Millisecond),
			BackoffMax:     dur(2 * time.Second),
			Warmup:         dur(0),
			WriteTimeout:   dur(10 * time.Second),
			MaxQueuedBytes: proto.Int32(8 << 20),
			// One connection of the M for bulk transfers (issue 23): a 256 KiB request then never
			// waits in front of the small ones in the kernel's buffers.
			LargeRequestBytes: proto.Int32(64 << 10),
			Protocol:          proto.String("dubbo"),
		},
		Hold: &sg.Hold{
			Timeout:     dur(3 * time.Second),
			MaxRequests: proto.Int32(10000),
			MaxBytes:    proto.Int32(64 << 20),
			// Three tries cover dubbo-go's 1-60 ms startup window with pauses of
			// upstream.backoff_base, doubling (docs/design.md, provider lifecycle).
			NotExecutedRetries: proto.Int32(3),
			NotExecutedWindow:  dur(10 * time.Second),
			// Consumers say how long they wait (Java 1 s and dubbo-go 3 s by default, both send it):
			// such a request waits that long less the margin, up to 30 s (docs/configuration.md).
			MaxTimeout:     dur(30 * time.Second),
			DeadlineMargin: dur(100 * time.Millisecond),
			// A quarter of max_bytes: at least four consumers can fill the queue (issue 23).
			MaxBytesPerConsumer: proto.Int32(16 << 20),
		},
		Keepalive: &sg.Keepalive{
			DownstreamIdleTimeout: dur(180 * time.Second),
			UpstreamInterval:      dur(30 * time.Second),
			UpstreamJitter:        proto.Float64(0.2),
			UpstreamMaxMissed:     proto.Int32(3),
			UpstreamHungTimeout:   dur(5 * time.Second),
		},
		Limits: &sg.Limits{
			MaxFrameBytes:               proto.Int32(8 << 20),
			MaxInflightPerConnection:    proto.Int32(10000),
			MaxRequestAge:               dur(60 * time.Second),
			MaxQueuedBytesPerConnection: proto.Int32(4 << 20),
			FrameReadTimeout:            dur(30 * time.Second),
			MaxBufferedBytes:            proto.Int32(256 << 20),
			// Backpressure on a consumer that feeds a provider faster than it reads (issue 23).
			MaxQueuedBytesPerConsumer: proto.Int32(4 << 20),
		},
		Drain: &sg.Drain{
			ReadonlyPolicy: sg.ReadonlyPolicy_HOLD.Enum(),
			Timeout:        dur(10 * time.Second),
			MinDuration:    dur(5 * time.Second),
		},
		Log: &sg.Log{
			Level:  proto.String("info"),
			Format: proto.String("json"),
		},
		Metrics: &sg.Metrics{
			// About 20 series per pair (docs/operations.md, per-method metrics).
			MaxMethods: proto.Int32(500),
		},
		AccessLog: &sg.AccessLog{
			Enabled:       proto.Bool(false),
			Failed:        proto.Bool(true),
			SlowThreshold: dur(time.Second),
			SampleRate:    proto.Float64(0),
			MaxPerSecond:  proto.Int32(100),
		},
		Http2: &sg.Http2{
			// RFC 9113 §6.5.2 recommends no fewer than 100; grpc-go's server announces no limit, Envoy 100.
			MaxConcurrentStreams: proto.Int32(100),
			// The protocol's initial value: what a peer may send before it hears anything anyway.
			InitialWindowSize: proto.Int32(65535),
			// Envoy's default is 60 KiB, grpc-go's 16 MiB, grpc-java's 8 KiB.
			MaxHeaderListSize: proto.Int32(64 << 10),
		},
	}
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

// WithDefaults returns overlay merged over Defaults(): the effective settings
// of a partial file or push. overlay may be nil.
func WithDefaults(overlay *sg.Settings) *sg.Settings { return Merge(Defaults(), overlay) }

// Merge returns a new Settings: a deep copy of base with every field that is
// set in overlay replacing base's value. Unset overlay fields keep base's
// value, so partial settings (a file, a per-node override, a push) layer
// cleanly. Durations replace whole; a non-empty repeated field replaces the
// base list (an empty list counts as unset). Neither argument is modified;
// either may be nil.
func Merge(base, overlay *sg.Settings) *sg.Settings {
	out := &sg.Settings{}
	if base != nil {
		out = proto.Clone(base).(*sg.Settings)
	}
	if overlay != nil {
		mergeInto(out.ProtoReflect(), overlay.ProtoReflect())
	}
	return out
}

func mergeInto(dst, src protoreflect.Message) {
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := dst.NewField(fd).List()
			for i := 0; i < v.List().Len(); i++ {
				l.Append(v.List().Get(i))
			}
			dst.Set(fd, protoreflect.ValueOfList(l))
		case fd.IsMap():
			m := dst.NewField(fd).Map()
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				m.Set(k, mv)
				return true
			})
			dst.Set(fd, protoreflect.ValueOfMap(m))
		case fd.Message() != nil && isAtomic(fd.Message()):
			dst.Set(fd, protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect()))
		case fd.Message() != nil:
			mergeInto(dst.Mutable(fd).Message(), v.Message())
		default:
			dst.Set(fd, v)
		}
		return true
	})
}

// isAtomic reports whether a message kind is a single value (Duration and the
// other well-known types) rather than a group of settings.
func isAtomic(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}
