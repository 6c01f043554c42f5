package settings

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	sg "github.com/stormgate/stormgate/settings/stormgatev1"
)

// Problem is one thing wrong with a Settings value: the field path in the
// schema's snake_case names (e.g. "keepalive.upstream_interval") and what is
// wrong, including the allowed range.
type Problem struct {
	Field   string
	Message string
	Line    int    // line in the file that set the field; 0 when unknown
	File    string // file name when several files were read; else ""
}

func (p Problem) Error() string {
	s := p.Message
	if p.Field != "" {
		s = p.Field + ": " + s
	}
	switch {
	case p.File != "" && p.Line > 0:
		s += " (" + p.File + " line " + strconv.Itoa(p.Line) + ")"
	case p.File != "":
		s += " (" + p.File + ")"
	case p.Line > 0:
		s += " (line " + strconv.Itoa(p.Line) + ")"
	}
	return s
}

// Problems is every problem found in one Settings value or file, in schema
// order. Its Error joins them with "; " (one line, fit for an xDS NACK's
// error_detail); range over it to print one line per problem.
type Problems []Problem

func (ps Problems) Error() string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Error()
	}
	return strings.Join(s, "; ")
}

// AllProblems joins the Problems of several checks (Validate, CheckLive) into
// one, so a rejection lists every problem at once; nil when all are nil. An
// error that is not Problems is returned as it is.
func AllProblems(errs ...error) error {
	var ps Problems
	for _, err := range errs {
		var more Problems
		switch {
		case err == nil:
		case errors.As(err, &more):
			ps = append(ps, more...)
		default:
			return err
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// Validate checks complete settings (normally WithDefaults of a file or a
// push) and returns nil or a Problems listing every problem, each naming the
// field path and its allowed range. A missing field is a problem: validate the
// merged value, not a partial overlay.
func Validate(s *sg.Settings) error {
	if s == nil {
		return Problems{{Message: "settings missing"}}
	}
	var ps Problems
	m := s.ProtoReflect()
	for _, r := range fieldRules {
		v, ok := lookup(m, r.path)
		if !ok {
			ps = append(ps, Problem{Field: r.path, Message: "missing; must be " + r.allowed})
			continue
		}
		ps = append(ps, r.check(r, v)...)
	}
	bad := map[string]bool{}
	for _, p := range ps {
		bad[p.Field] = true
	}
	for _, c := range crossRules {
		for _, p := range c(s) {
			if !bad[p.Field] { // a value already out of range says enough
				ps = append(ps, p)
			}
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// FieldInfo documents one leaf setting: the source for docs/configuration.md.
type FieldInfo struct {
	Path    string // snake_case path, e.g. "hold.timeout"
	Help    string // what it does
	Allowed string // allowed values, e.g. "between 1s and 1h"
	Live    bool   // whether a change applies without a restart
	Default string // the default, as /config_dump prints it
}

// Fields lists every leaf setting in schema order with its meaning, allowed
// range, default and whether it can change live.
func Fields() []FieldInfo {
	d := Defaults().ProtoReflect()
	out := make([]FieldInfo, 0, len(fieldRules))
	for _, r := range fieldRules {
		fi := FieldInfo{Path: r.path, Help: r.help, Allowed: r.allowed, Live: r.restart == live}
		if IsByteSize(fieldDesc(r.path)) {
			fi.Allowed += " bytes; units: 512KiB, 64MiB, 1GiB"
		}
		if v, ok := lookup(d, r.path); ok {
			fi.Default = formatValue(fieldDesc(r.path), v)
		}
		out = append(out, fi)
	}
	return out
}

type rule struct {
	path    string
	help    string
	allowed string // human text after "must be "
	check   func(r rule, v protoreflect.Value) Problems
	restart string // why the field cannot change live; "" (live) when it can
}

// live marks a rule whose field changes on a running sidecar.
const live = ""

// restart marks a rule whose field cannot change on a running sidecar, and says why: a push
// that changes it is refused with this reason (CheckLive).
func restart(why string) string { return why }

// ruleFor returns the rule of a leaf field path.
func ruleFor(path string) (rule, bool) {
	for _, r := range fieldRules {
		if r.path == path {
			return r, true
		}
	}
	return rule{}, false
}

func (r rule) bad(what string) Problems {
	return Problems{{Field: r.path, Message: what + "; must be " + r.allowed}}
}

// lookup returns the value at a dotted path and whether every step is set.
// Lists count as set when non-empty.
func lookup(m protoreflect.Message, path string) (protoreflect.Value, bool) {
	parts := strings.Split(path, ".")
	for i, name := range parts {
		fd := m.Descriptor().Fields().ByName(protoreflect.Name(name))
		if fd == nil || !m.Has(fd) {
			return protoreflect.Value{}, false
		}
		v := m.Get(fd)
		if i == len(parts)-1 {
			return v, true
		}
		m = v.Message()
	}
	return protoreflect.Value{}, false
}

func fieldDesc(path string) protoreflect.FieldDescriptor {
	md := (&sg.Settings{}).ProtoReflect().Descriptor()
	var fd protoreflect.FieldDescriptor
	for _, name := range strings.Split(path, ".") {
		if md == nil {
			return nil // a path through a leaf
		}
		fd = md.Fields().ByName(protoreflect.Name(name))
		if fd == nil {
			return nil
		}
		md = fd.Message()
	}
	return fd
}

func intIn(lo, hi int64) func(rule, protoreflect.Value) Problems {
	return func(r rule, v protoreflect.Value) Problems {
		n := v.Int()
		return r.outside(strconv.FormatInt(n, 10), float64(n), float64(lo), float64(hi))
	}
}

// intOff accepts lo..hi, and exactly 0 (feature off).
func intOff(lo, hi int64) func(rule, protoreflect.Value) Problems {
	in := intIn(lo, hi)
	return func(r rule, v protoreflect.Value) Problems {
		if v.Int() == 0 {
			return nil
		}
		return in(r, v)
	}
}

func floatIn(lo, hi float64) func(rule, protoreflect.Value) Problems {
	return func(r rule, v protoreflect.Value) Problems {
		f := v.Float()
		if f != f { // NaN
			return r.bad("NaN is not a number")
		}
		return r.outside(strconv.FormatFloat(f, 'g', -1, 64), f, lo, hi)
	}
}

func (r rule) outside(shown string, v, lo, hi float64) Problems {
	switch {
	case v < 0 && lo >= 0:
		return r.bad(shown + " is negative")
	case v < lo:
		return r.bad(shown + " is too small")
	case v > hi:
		return r.bad(shown + " is too large")
	}
	return nil
}

// durIn accepts lo..hi; with zeroOff it also accepts exactly 0 (feature off).
func durIn(lo, hi time.Duration, zeroOff bool) func(rule, protoreflect.Value) Problems {
	return func(r rule, v protoreflect.Value) Problems {
		pd := v.Message().Interface().(*durationpb.Duration)
		if err := pd.CheckValid(); err != nil {
			return r.bad("invalid duration")
		}
		d := pd.AsDuration()
		if zeroOff && d == 0 {
			return nil
		}
		return r.outside(fmtDur(d), float64(d), float64(lo), float64(hi))
	}
}

func oneOf(names ...string) func(rule, protoreflect.Value) Problems {
	return func(r rule, v protoreflect.Value) Problems {
		for _, n := range names {
			if v.String() == n {
				return nil
			}
		}
		return r.bad(strconv.Quote(v.String()) + " is not allowed")
	}
}

func enumIn(names ...string) func(rule, protoreflect.Value) Problems {
	return func(r rule, v protoreflect.Value) Problems {
		ed := fieldDesc(r.path).Enum()
		ev := ed.Values().ByNumber(v.Enum())
		name := strconv.Itoa(int(v.Enum()))
		if ev != nil {
			name = string(ev.Name())
		}
		for _, n := range names {
			if name == n {
				return nil
			}
		}
		return r.bad(name + " is not allowed")
	}
}

func hostPort(allowEmpty bool) func(rule, protoreflect.Value) Problems {
	return func(r rule, v protoreflect.Value) Problems {
		s := v.String()
		if s == "" {
			if allowEmpty {
				return nil
			}
			return r.bad("empty")
		}
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return r.bad(strconv.Quote(s) + " is not host:port")
		}
		if strings.ContainsAny(host, " \t/") {
			return r.bad(strconv.Quote(s) + " has a bad host")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return r.bad(strconv.Quote(s) + " has a bad port")
		}
		return nil
	}
}

func anyBool(rule, protoreflect.Value) Problems { return nil }

func portList(r rule, v protoreflect.Value) Problems {
	var ps Problems
	l := v.List()
	seen := map[int64]bool{}
	for i := 0; i < l.Len(); i++ {
		p := l.Get(i).Int()
		field := fmt.Sprintf("%s[%d]", r.path, i)
		switch {
		case p < 1 || p > 65535:
			ps = append(ps, Problem{Field: field, Message: fmt.Sprintf("%d is not a port; must be %s", p, r.allowed)})
		case seen[p]:
			ps = append(ps, Problem{Field: field, Message: fmt.Sprintf("%d is listed twice; must be %s", p, r.allowed)})
		}
		seen[p] = true
	}
	return ps
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
)

// fieldRules has one entry per leaf field of Settings, in schema order; a
// test fails when a field is added to the proto without a rule here. The last
// column says whether the field is live (a change applies within a second,
// nothing dropped) or why it cannot change while the sidecar runs.
var fieldRules = []rule{
	{"listener.address", "host:port the consumer-facing listener binds.", "host:port", hostPort(false), restart("the listening socket is bound once at start and consumers are connected to it")},
	{"listener.backlog", "listen(2) backlog; the kernel caps it at net.core.somaxconn.", "between 1 and 4194304", intIn(1, 4194304), live},
	{"listener.transparent", "Transparent mode: iptables REDIRECTs inbound ports here; upstream is 127.0.0.1:<original port>.", "true or false", anyBool, restart("transparent mode decides how every connection finds its upstream and is set up with iptables at start")},
	{"listener.inbound_ports", "Inbound Dubbo ports redirected to the listener in transparent mode.", "distinct ports between 1 and 65535", portList, live},
	{"admission.accept_rate", "Connections admitted per second (token bucket rate).", "between 1 and 1000000", floatIn(1, 1e6), live},
	{"admission.accept_burst", "Token bucket burst.", "between 1 and 1000000", intIn(1, 1e6), live},
	{"admission.max_connections", "Consumer connections over this are closed at once.", "between 1 and 10000000", intIn(1, 1e7), live},
	{"admission.max_pending", "Accepted-but-not-yet-admitted connections over this are closed at once.", "between 1 and 1000000", intIn(1, 1e6), live},
	{"admission.max_wait", "Longest a connection waits for admission before it is admitted anyway.", "between 0s and 1m", durIn(0, time.Minute, false), live},
	{"admission.per_source_fairness", "Serve the pending queue round robin by source address.", "true or false", anyBool, live},
	{"admission.tcp_quickack", "TCP_QUICKACK on accepted connections.", "true or false", anyBool, live},
	{"admission.tcp_fastopen", "TCP_FASTOPEN queue length on the listener; 0 turns it off.", "between 0 and 65535", intIn(0, 65535), live},
	{"admission.tcp_keepalive_idle", "SO_KEEPALIVE idle time toward consumers; 0 turns TCP keepalive off.", "0 (off) or between 1s and 2h", durIn(time.Second, 2*time.Hour, true), live},
	{"upstream.address", "Provider host:port (ignored in transparent mode).", "host:port", hostPort(true), restart("consumers hold requests in flight on connections to this provider; run one sidecar per provider")},
	{"upstream.connections", "Connections to the provider.", "between 1 and 64", intIn(1, 64), live},
	{"upstream.connect_timeout", "Timeout of one dial to the provider.", "between 10ms and 1m", durIn(10*time.Millisecond, time.Minute, false), live},
	{"upstream.backoff_base", "First reconnect backoff (exponential, full jitter).", "between 1ms and 1m", durIn(time.Millisecond, time.Minute, false), live},
	{"upstream.backoff_max", "Reconnect backoff cap.", "between 1ms and 10m", durIn(time.Millisecond, 10*time.Minute, false), live},
	{"upstream.warmup", "When the provider is back after an outage (no usable connection, then one), ramp its calls from 5% to 100% of the rate before the outage over this long (a cold JVM is not hit with the full load at once); calls over the ramp wait in the hold queue. One ramp per provider for Dubbo requests and Triple/gRPC calls together; 0 = at once.", "between 0s and 10m", durIn(0, 10*time.Minute, false), live},
	{"upstream.write_timeout", "A provider connection whose queued requests the kernel takes no byte of for this long is dead (the provider stopped reading): its requests that never left Stormgate are sent on another connection, the others answered; 0 turns the check off.", "0 (off) or between 100ms and 10m", durIn(100*time.Millisecond, 10*time.Minute, true), live},
	{"upstream.max_queued_bytes", "Bytes that may wait in Stormgate for one provider connection; over it new requests go to another connection or the hold queue (an empty connection always takes one frame).", "between 65536 and 1073741824", intIn(64*kib, gib), live},
	{"upstream.large_request_bytes", "Requests larger than this (header included) go to one provider connection kept for them, the last of upstream.connections when there are at least 2, and smaller ones avoid it: a bulk transfer then never waits in front of small requests, in Stormgate or in the kernel's socket buffers, which no queue can reorder. 0: every request goes to the least loaded connection.", "0 (off) or between 1024 and 1073741824", intOff(kib, gib), live},
	{"upstream.protocol", "What the provider speaks: dubbo (Dubbo 2), triple (Dubbo 3 Triple or gRPC: HTTP/2 without TLS, prior knowledge) or both (a provider serving both on one port, Dubbo 3's port unification). Consumers of both protocols share the listener and the first bytes of a connection decide; a consumer of a protocol the provider does not speak is closed (counted as protocol_not_served), except that with dubbo an HTTP/2 client gets what any non-Dubbo client gets. Stormgate opens upstream.connections connections per protocol the provider speaks.", "dubbo, triple or both", oneOf(stringChoices["upstream.protocol"]...), restart("the provider's connections are opened in its protocol at start")},
	{"hold.timeout", "Longest a request that carries no timeout of its own waits for the provider to come back (a request that carries one waits up to it: hold.max_timeout); 0 turns holding off, requests fail at once.", "between 0s and 1h", durIn(0, time.Hour, false), live},
	{"hold.max_requests", "Requests the hold queue keeps, of either protocol: Dubbo requests waiting for the provider and Triple or gRPC calls waiting for a provider stream count alike; more get an error response (Triple and gRPC: UNAVAILABLE).", "between 0 and 1000000", intIn(0, 1e6), live},
	{"hold.max_bytes", "Bytes the hold queue keeps (a Triple or gRPC call counts its headers and the request DATA kept while it waits); more get an error response.", "between 0 and 1073741824", intIn(0, gib), live},
	{"hold.not_executed_retries", "Times a request goes back to the hold queue when the provider answers that it never ran it (service not exported yet or any more, thread pool full; docs/design.md lists the answers), within not_executed_window; each retry waits upstream.backoff_base, doubling; 0 passes those answers to the consumer as they are.", "between 0 and 10", intIn(0, 10), live},
	{"hold.not_executed_window", "How long after a provider connection opens, or after the provider says READONLY, WRITEABLE or closing (Dubbo) or answers not-exported for a method it served on that connection (Triple: its unexport at shutdown), not-executed answers are re-held; 0 turns re-holding off.", "0 (off) or between 100ms and 10m", durIn(100*time.Millisecond, 10*time.Minute, true), live},
	{"hold.max_timeout", "Longest a request that carries its consumer's own timeout (the Dubbo timeout attachment, which Java and dubbo-go consumers send with every call; Triple's and gRPC's grpc-timeout) waits for the provider: until that timeout less hold.deadline_margin, at most this long (and less than limits.max_request_age, which counts from arrival too); it is never sent later. 0 ignores consumers' timeouts: every request waits up to hold.timeout, and may reach the provider after its consumer gave up.", "0 (off) or between 100ms and 1h", durIn(100*time.Millisecond, time.Hour, true), live},
	{"hold.deadline_margin", "How long before its consumer's deadline a request must have left Stormgate: the provider's queueing time and the answer's way back. A request that would leave later is answered by Stormgate (status 31; Triple and gRPC: grpc-status 4; local reply reason deadline) and never sent.", "between 0s and 10s", durIn(0, 10*time.Second, false), live},
	{"hold.max_bytes_per_consumer", "Bytes of one consumer's requests the hold queue keeps while the provider is away; past it that consumer's new requests are answered (status 100, overloaded; Triple and gRPC: UNAVAILABLE) instead of held, so that one consumer cannot fill the queue for everyone. (While the provider serves, limits.max_queued_bytes_per_consumer slows a consumer down instead.) 0: no per-consumer bound.", "0 (off) or between 65536 and 1073741824", intOff(64*kib, gib), live},
	{"keepalive.downstream_idle_timeout", "A consumer that sent nothing for this long and waits for no answer is closed; 0 turns it off.", "0 (off) or between 1s and 24h", durIn(time.Second, 24*time.Hour, true), live},
	{"keepalive.upstream_interval", "Heartbeat an idle upstream connection this often.", "between 1s and 1h", durIn(time.Second, time.Hour, false), live},
	{"keepalive.upstream_jitter", "Fraction of upstream_interval to jitter by (0.2 = +-20%).", "between 0 and 0.5", floatIn(0, 0.5), live},
	{"keepalive.upstream_max_missed", "Heartbeat intervals without an answer before an upstream connection is dead.", "between 1 and 100", intIn(1, 100), live},
	{"keepalive.upstream_hung_timeout", "A provider connection that owes an answer (to a request or a heartbeat) and has said nothing for this long, although a heartbeat (Triple and gRPC: a PING) went out at least half of it ago, or whose kernel took no byte for this long, is hung: it takes no new requests until the provider is heard again, and a provider with no other usable connection is not ready (/readyz 503, READONLY to its consumers, stormgate_upstream_hung). 0 turns detection off.", "0 (off) or between 1s and 1h", durIn(time.Second, time.Hour, true), live},
	{"limits.max_frame_bytes", "Largest Dubbo frame accepted (header + body).", "between 1024 and 1073741824", intIn(kib, gib), live},
	{"limits.max_inflight_per_connection", "In-flight two-way requests per consumer.", "between 1 and 1000000", intIn(1, 1e6), live},
	{"limits.max_request_age", "A pending Dubbo request older than this gets an error response. Not Triple or gRPC calls, which their consumers bound (grpc-timeout, then RST_STREAM, which Stormgate passes on to the provider): a streaming call may rightly stay open for hours.", "between 1s and 1h", durIn(time.Second, time.Hour, false), live},
	{"limits.max_queued_bytes_per_connection", "A consumer whose unread responses exceed this is closed.", "between 65536 and 1073741824", intIn(64*kib, gib), live},
	{"limits.frame_read_timeout", "A consumer that sent part of a frame and not the rest for this long is closed (instead of holding a buffer until the idle timeout); an HTTP/2 consumer that keeps a stream's window shut this long while its answer waits gets that stream reset (RST_STREAM CANCEL, counted as zero_window_stall); 0 turns both off.", "0 (off) or between 1s and 1h", durIn(time.Second, time.Hour, true), live},
	{"limits.max_buffered_bytes", "Bytes the whole process keeps because a peer is slow or absent (requests queued behind a stalled socket on either side, the hold queue, frames arriving in pieces); over it new ones are refused with an overload error.", "between 1048576 and 2147483647", intIn(mib, 2*gib-1), live},
	{"limits.max_queued_bytes_per_consumer", "A consumer with more than this many bytes of requests waiting in Stormgate for a provider that serves, but not as fast as it is fed (its connections' send queues and the hold queue), is not read until half of them have drained: its socket fills and TCP slows that consumer alone (stormgate_consumers_paused). With many such consumers each gets less: at most half of hold.max_bytes divided among the consumers with bytes waiting (at least 128 KiB), so that together they slow down rather than fill the hold queue. Never while the provider is away (hold.max_bytes_per_consumer then). 0: never paused.", "0 (off) or between 65536 and 1073741824", intOff(64*kib, gib), live},
	{"drain.readonly_policy", "On a provider READONLY event: HOLD requests for the provider's return, or PROPAGATE READONLY to consumers. Triple and gRPC: a provider's GOAWAY is always held (its connection takes no new streams, calls wait for another connection or the provider's return); GOAWAY is never passed on to consumers, whose connections it would end.", "HOLD or PROPAGATE", enumIn("HOLD", "PROPAGATE"), live},
	{"drain.timeout", "Bounds two drains. Stormgate's own (SIGTERM, POST /drain): after drain.min_duration and once accepting stopped, how long requests in flight may finish before Stormgate exits; 0 exits at once. A provider's (it sent READONLY, or said it is closing): how long new requests are kept off its connections (held, or READONLY passed on, by drain.readonly_policy) while its own requests finish; past it, its connections take requests again; 0 does not wait.", "between 0s and 10m", durIn(0, 10*time.Minute, false), live},
	{"drain.min_duration", "On SIGTERM or POST /drain: how long /readyz answers 503 and READONLY is out while the listener still accepts and requests are still served, before accepting stops and in-flight requests get drain.timeout to finish (Istio's terminationDrainDuration). A second SIGTERM skips the rest of it.", "between 0s and 10m", durIn(0, 10*time.Minute, false), live},
	{"log.level", "Log level.", "debug, info, warn or error", oneOf(stringChoices["log.level"]...), live},
	{"log.format", "Log encoding.", "json or console", oneOf(stringChoices["log.format"]...), restart("the logger is built once at start")},
	{"metrics.max_methods", "Most distinct service/method pairs the per-method metrics keep (about 20 series each); calls of further pairs are counted under service and method \"other\" (stormgate_method_labels_overflow_total); 0 turns per-method metrics off and requests are not decoded.", "between 0 and 10000", intIn(0, 10000), live},
	{"access_log.enabled", "Write the access log: one structured line per selected call, logger \"access\", whatever log.level says.", "true or false", anyBool, live},
	{"access_log.failed", "Log every failed call: a status other than OK, a business exception, or an answer from Stormgate itself.", "true or false", anyBool, live},
	{"access_log.slow_threshold", "Log every call that took at least this long; 0 turns it off.", "0 (off) or between 1ms and 1h", durIn(time.Millisecond, time.Hour, true), live},
	{"access_log.sample_rate", "Fraction of the other calls logged, at random.", "between 0 and 1", floatIn(0, 1), live},
	{"access_log.max_per_second", "Most access log lines per second (token bucket, burst the same); lines over it are counted in stormgate_access_log_dropped_total, not written.", "between 1 and 1000000", intIn(1, 1e6), live},
	{"http2.max_concurrent_streams", "Streams one HTTP/2 consumer connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS); Stormgate announces the smaller of this and limits.max_inflight_per_connection, and refuses a stream over it with RST_STREAM REFUSED_STREAM (gRPC clients retry those). Read when a connection opens: a change applies to consumer connections opened after it.", "between 1 and 1000000", intIn(1, 1e6), live},
	{"http2.initial_window_size", "Stream receive window Stormgate announces to HTTP/2 consumers and to the provider (SETTINGS_INITIAL_WINDOW_SIZE): the bytes of one stream a peer may send before Stormgate hands window back, which it does only once they went on (a request body to the provider, an answer to its consumer). It bounds what one stream can make Stormgate hold, and so what a slow consumer holds per stream; larger windows move big messages in fewer round trips. At most 2^31-1, RFC 9113's largest window. The connection window is 1 MiB, or this when larger. Read when a connection opens: a change applies to consumer connections opened after it, and to provider connections when they are next dialled.", "between 1024 and 2147483647", intIn(kib, 1<<31-1), live},
	{"http2.max_header_list_size", "Largest header list Stormgate accepts from an HTTP/2 consumer (a request head or trailers) or the provider (an answer head or trailers), as RFC 9113 §6.5.2 counts it (SETTINGS_MAX_HEADER_LIST_SIZE). A larger list resets that stream alone (to a consumer: RST_STREAM ENHANCE_YOUR_CALM, which gRPC reports as RESOURCE_EXHAUSTED; from the provider: its call ends with grpc-status 14) and the connection lives; an encoded header block larger than this ends the connection (GOAWAY ENHANCE_YOUR_CALM, the CONTINUATION-flood guard). Read when a connection opens: a change applies to consumer connections opened after it, and to provider connections when they are next dialled.", "between 1024 and 1048576", intIn(kib, mib), live},
}

// stringChoices are the string fields with a fixed set of values: files, flags and annotations
// take them in any case and store them as written here (as enums take "hold" for HOLD).
var stringChoices = map[string][]string{
	"log.level":         {"debug", "info", "warn", "error"},
	"log.format":        {"json", "console"},
	"upstream.protocol": {"dubbo", "triple", "both"},
}

// crossRules check relations between fields.
var crossRules = []func(*sg.Settings) Problems{
	func(s *sg.Settings) Problems {
		h, a := s.GetHold().GetTimeout(), s.GetLimits().GetMaxRequestAge()
		if h == nil || a == nil || h.AsDuration() < a.AsDuration() {
			return nil
		}
		// A held request counts its age from its arrival: held this long, it would be
		// answered as too old right after it is finally sent.
		return Problems{{Field: "hold.timeout", Message: fmt.Sprintf("%s is not below limits.max_request_age (%s); must be below limits.max_request_age",
			fmtDur(h.AsDuration()), fmtDur(a.AsDuration()))}}
	},
	func(s *sg.Settings) Problems {
		if !s.GetListener().GetTransparent() {
			return nil
		}
		_, port, err := net.SplitHostPort(s.GetListener().GetAddress())
		if err != nil {
			return nil
		}
		var ps Problems
		for i, p := range s.GetListener().GetInboundPorts() {
			if strconv.Itoa(int(p)) == port {
				// The pool for that port would dial 127.0.0.1:port: Stormgate itself.
				ps = append(ps, Problem{Field: fmt.Sprintf("listener.inbound_ports[%d]", i), Message: fmt.Sprintf(
					"%d is listener.address's own port; must be the provider's ports, not Stormgate's", p)})
			}
		}
		return ps
	},
	func(s *sg.Settings) Problems {
		b, m := s.GetUpstream().GetBackoffBase(), s.GetUpstream().GetBackoffMax()
		if b == nil || m == nil || b.AsDuration() <= m.AsDuration() {
			return nil
		}
		return Problems{{Field: "upstream.backoff_max", Message: fmt.Sprintf("%s is below upstream.backoff_base (%s); must be at least upstream.backoff_base",
			fmtDur(m.AsDuration()), fmtDur(b.AsDuration()))}}
	},
	func(s *sg.Settings) Problems {
		if s.GetListener().GetTransparent() || s.GetUpstream().GetAddress() != "" {
			return nil
		}
		return Problems{{Field: "upstream.address", Message: "empty; must be host:port unless listener.transparent is true"}}
	},
}

// fmtDur prints a duration the short way: 1h, 1m30s, 50ms, -1s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// formatValue prints a leaf value as /config_dump and the docs show it.
func formatValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd == nil:
		return v.String()
	case fd.IsList():
		parts := make([]string, v.List().Len())
		for i := range parts {
			parts[i] = formatValue(nil, v.List().Get(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case fd.Kind() == protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
	case fd.Message() != nil:
		if d, ok := v.Message().Interface().(*durationpb.Duration); ok {
			return fmtDur(d.AsDuration())
		}
	case fd.Kind() == protoreflect.DoubleKind:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return v.String()
}
