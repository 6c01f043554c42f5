package loadgen

import (
	"encoding/json"
	"time"

	"github.com/stormgate/stormgate/loadgen/hist"
)

// Result is everything one run observed. Results from several processes merge with Merge.
//
// Accounting identities (exact once the run has ended):
//
//	Scheduled = Sent + OneWaySent + Unsent
//	Sent      = OK + BodyMismatches + Exceptions + Errors + Timeouts + Lost + Abandoned
//	Errors    = sum of ErrorByStatus
//	HeartbeatsSent = HeartbeatsAnswered + HeartbeatsTimedOut + HeartbeatsLost + HeartbeatsAbandoned
type Result struct {
	Config `json:"config"`
	// Workers is the number of processes merged into this result (1 for a single Run).
	Workers int `json:"workers"`
	// Interrupted is true when the caller's context ended the run early.
	Interrupted bool `json:"interrupted"`
	// Elapsed is the whole run; ConnectPhase and RunPhase are its parts (drain is the rest).
	Elapsed      time.Duration `json:"elapsed_ns"`
	ConnectPhase time.Duration `json:"connect_phase_ns"`
	RunPhase     time.Duration `json:"run_phase_ns"`
	// MaxAnswerGap is the longest time in the request phase without any answer (request or
	// heartbeat) arriving: a stall of the server shows here whole (an upgrade's handover, a
	// pause). Merged results keep the largest of their processes', an upper bound of the
	// gap across all of them.
	MaxAnswerGap time.Duration `json:"max_answer_gap_ns"`

	// Connections.
	ConnsOpened     uint64          `json:"conns_opened"`      // successful dials, reconnects included
	ConnsOpenAtEnd  uint64          `json:"conns_open_at_end"` // open when the run ended
	ConnectFailures ConnectFailures `json:"connect_failures"`
	Reconnects      uint64          `json:"reconnects"`       // successful redials after a close (Config.Reconnect)
	Resets          uint64          `json:"resets"`           // ECONNRESET/EPIPE on an open connection
	ClosedByPeer    uint64          `json:"closed_by_peer"`   // orderly close (EOF) from the server
	LeftOnReadonly  uint64          `json:"left_on_readonly"` // closed by us after READONLY (LeaveOnReadonly)
	ProtocolErrors  uint64          `json:"protocol_errors"`  // bad magic or frame length: we closed
	OtherConnErrors uint64          `json:"other_conn_errors"`

	// Requests (two-way, non-event).
	Scheduled  uint64 `json:"scheduled"`
	Sent       uint64 `json:"sent"`
	Unsent     uint64 `json:"unsent"`       // no open (or, with HonorReadonly, writable) connection, or its send buffer was over 1 MiB
	Paused     uint64 `json:"paused"`       // fell due while the run was paused (Config.Pause): never sent, not in Scheduled
	OneWaySent uint64 `json:"one_way_sent"` // one-way requests (checked bodies only): no answer expected
	OK         uint64 `json:"ok"`           // status 20, value or null; with checked bodies, exactly the request's body
	// BodyMismatches are status-20 answers that were not exactly the request's checked body;
	// ForeignBodies, a subset, carried another request's intact body. Both must be 0.
	BodyMismatches uint64         `json:"body_mismatches"`
	ForeignBodies  uint64         `json:"foreign_bodies"`
	Exceptions     uint64         `json:"exceptions"`
	Errors         uint64         `json:"errors"` // non-20 status
	ErrorByStatus  map[int]uint64 `json:"error_by_status"`
	Timeouts       uint64         `json:"timeouts"`  // no answer within Timeout of the scheduled time
	Lost           uint64         `json:"lost"`      // in flight when their connection closed
	Abandoned      uint64         `json:"abandoned"` // in flight when the caller cancelled the run
	LateReplies    uint64         `json:"late_replies"`
	UnknownIDs     uint64         `json:"unknown_ids"`
	Duplicates     uint64         `json:"duplicates"`

	// Heartbeats we sent, and events the server sent us.
	HeartbeatsSent      uint64 `json:"heartbeats_sent"`
	HeartbeatsAnswered  uint64 `json:"heartbeats_answered"`
	HeartbeatsTimedOut  uint64 `json:"heartbeats_timed_out"`
	HeartbeatsLost      uint64 `json:"heartbeats_lost"`
	HeartbeatsAbandoned uint64 `json:"heartbeats_abandoned"`
	ServerHeartbeats    uint64 `json:"server_heartbeats"` // two-way event requests received, each answered (Java form)
	EventsReadonly      uint64 `json:"events_readonly"`
	EventsWriteable     uint64 `json:"events_writeable"`
	EventsOther         uint64 `json:"events_other"`        // one-way events that are neither
	UnexpectedRequests  uint64 `json:"unexpected_requests"` // non-event requests from the server (ignored)

	// Triple (Protocol "triple"): heartbeats above are PINGs (sent only on connections idle for the
	// interval), ServerHeartbeats the server's PINGs this side answered, Errors and ErrorByStatus count
	// calls by their non-zero grpc-status, and GRPCStatus counts every answered call by it (0 included).
	// A call the server reset is an error with the code grpc-go reports (REFUSED_STREAM: 14, CANCEL: 1,
	// others: 13) and counts in StreamResets too. StreamsWaited counts calls that waited for a stream
	// (the server's SETTINGS, or its SETTINGS_MAX_CONCURRENT_STREAMS); MaxOpenStreams is the most
	// streams open at once on one connection (never above the server's limit); GoAways counts the
	// server's GOAWAYs (calls above its last stream id count as Lost).
	GRPCStatus     map[int]uint64 `json:"grpc_status,omitempty"`
	StreamsWaited  uint64         `json:"streams_waited,omitempty"`
	StreamResets   uint64         `json:"stream_resets,omitempty"`
	GoAways        uint64         `json:"goaways,omitempty"`
	MaxOpenStreams int            `json:"max_open_streams,omitempty"`

	// Latency of answered requests (any status), from the scheduled send time.
	Latency     hist.Summary    `json:"latency"`
	LatencyHist *hist.Histogram `json:"latency_hist"`
	// HeartbeatRTT of answered heartbeats, from the actual send time.
	HeartbeatRTT  hist.Summary    `json:"heartbeat_rtt"`
	HeartbeatHist *hist.Histogram `json:"heartbeat_hist"`
	// ConnectTime of successful dials.
	ConnectTime hist.Summary    `json:"connect_time"`
	ConnectHist *hist.Histogram `json:"connect_hist"`
	// FirstReply is from the start of a dial to the first answer on that connection.
	FirstReply     hist.Summary    `json:"first_reply"`
	FirstReplyHist *hist.Histogram `json:"first_reply_hist"`

	CPU CPUUsage `json:"cpu"`
}

// ConnectFailures counts failed dials by cause.
type ConnectFailures struct {
	Refused uint64 `json:"refused"`
	Timeout uint64 `json:"timeout"`
	Reset   uint64 `json:"reset"`
	Other   uint64 `json:"other"`
}

// Total is the sum over causes.
func (c ConnectFailures) Total() uint64 { return c.Refused + c.Timeout + c.Reset + c.Other }

// CPUUsage is this process's CPU (getrusage), summed over workers in a merged result. The Run* figures
// cover the request phase only; PerRequest = (RunUser+RunSys)/Sent and PerFrame divides by every frame
// sent in the request phase (requests, heartbeats, heartbeat replies).
type CPUUsage struct {
	User       time.Duration `json:"user_ns"`
	Sys        time.Duration `json:"sys_ns"`
	RunUser    time.Duration `json:"run_user_ns"`
	RunSys     time.Duration `json:"run_sys_ns"`
	RunFrames  uint64        `json:"run_frames"`
	PerRequest time.Duration `json:"per_request_ns"`
	PerFrame   time.Duration `json:"per_frame_ns"`
	MaxRSSKiB  int64         `json:"max_rss_kib"` // summed over workers
}

// JSON encodes r, histograms included (sparse).
func (r *Result) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// ParseResult decodes a Result written by JSON.
func ParseResult(b []byte) (*Result, error) {
	r := newResult()
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	r.summarize()
	return r, nil
}

func newResult() *Result {
	return &Result{
		ErrorByStatus: map[int]uint64{}, GRPCStatus: map[int]uint64{},
		LatencyHist: new(hist.Histogram), HeartbeatHist: new(hist.Histogram),
		ConnectHist: new(hist.Histogram), FirstReplyHist: new(hist.Histogram),
	}
}

// Merge adds o (another process's result for the same scenario) into r: counts, CPU and histograms
// are summed, phase times take the maximum, and Conns, Rate and Requests add up.
func (r *Result) Merge(o *Result) {
	if r.ErrorByStatus == nil {
		r.ErrorByStatus = map[int]uint64{}
	}
	if r.GRPCStatus == nil {
		r.GRPCStatus = map[int]uint64{}
	}
	for _, h := range []**hist.Histogram{&r.LatencyHist, &r.HeartbeatHist, &r.ConnectHist, &r.FirstReplyHist} {
		if *h == nil {
			*h = new(hist.Histogram)
		}
	}
	if r.Workers == 0 {
		r.Config = o.Config
	} else {
		r.Conns += o.Conns
		r.Rate += o.Rate
		r.Requests += o.Requests
	}
	r.Workers += max(o.Workers, 1)
	r.Interrupted = r.Interrupted || o.Interrupted
	r.Elapsed = max(r.Elapsed, o.Elapsed)
	r.ConnectPhase = max(r.ConnectPhase, o.ConnectPhase)
	r.RunPhase = max(r.RunPhase, o.RunPhase)
	add := func(dst *uint64, v uint64) { *dst += v }
	add(&r.ConnsOpened, o.ConnsOpened)
	add(&r.ConnsOpenAtEnd, o.ConnsOpenAtEnd)
	add(&r.ConnectFailures.Refused, o.ConnectFailures.Refused)
	add(&r.ConnectFailures.Timeout, o.ConnectFailures.Timeout)
	add(&r.ConnectFailures.Reset, o.ConnectFailures.Reset)
	add(&r.ConnectFailures.Other, o.ConnectFailures.Other)
	r.MaxAnswerGap = max(r.MaxAnswerGap, o.MaxAnswerGap)
	add(&r.Reconnects, o.Reconnects)
	add(&r.LeftOnReadonly, o.LeftOnReadonly)
	add(&r.Resets, o.Resets)
	add(&r.ClosedByPeer, o.ClosedByPeer)
	add(&r.ProtocolErrors, o.ProtocolErrors)
	add(&r.OtherConnErrors, o.OtherConnErrors)
	add(&r.Scheduled, o.Scheduled)
	add(&r.Sent, o.Sent)
	add(&r.Unsent, o.Unsent)
	add(&r.Paused, o.Paused)
	add(&r.OneWaySent, o.OneWaySent)
	add(&r.OK, o.OK)
	add(&r.BodyMismatches, o.BodyMismatches)
	add(&r.ForeignBodies, o.ForeignBodies)
	add(&r.Exceptions, o.Exceptions)
	add(&r.Errors, o.Errors)
	for k, v := range o.ErrorByStatus {
		r.ErrorByStatus[k] += v
	}
	add(&r.Timeouts, o.Timeouts)
	add(&r.Lost, o.Lost)
	add(&r.Abandoned, o.Abandoned)
	add(&r.LateReplies, o.LateReplies)
	add(&r.UnknownIDs, o.UnknownIDs)
	add(&r.Duplicates, o.Duplicates)
	add(&r.HeartbeatsSent, o.HeartbeatsSent)
	add(&r.HeartbeatsAnswered, o.HeartbeatsAnswered)
	add(&r.HeartbeatsTimedOut, o.HeartbeatsTimedOut)
	add(&r.HeartbeatsLost, o.HeartbeatsLost)
	add(&r.HeartbeatsAbandoned, o.HeartbeatsAbandoned)
	add(&r.ServerHeartbeats, o.ServerHeartbeats)
	add(&r.EventsReadonly, o.EventsReadonly)
	add(&r.EventsWriteable, o.EventsWriteable)
	add(&r.EventsOther, o.EventsOther)
	add(&r.UnexpectedRequests, o.UnexpectedRequests)
	for k, v := range o.GRPCStatus {
		r.GRPCStatus[k] += v
	}
	add(&r.StreamsWaited, o.StreamsWaited)
	add(&r.StreamResets, o.StreamResets)
	add(&r.GoAways, o.GoAways)
	r.MaxOpenStreams = max(r.MaxOpenStreams, o.MaxOpenStreams)
	r.LatencyHist.Merge(o.LatencyHist)
	r.HeartbeatHist.Merge(o.HeartbeatHist)
	r.ConnectHist.Merge(o.ConnectHist)
	r.FirstReplyHist.Merge(o.FirstReplyHist)
	r.CPU.User += o.CPU.User
	r.CPU.Sys += o.CPU.Sys
	r.CPU.RunUser += o.CPU.RunUser
	r.CPU.RunSys += o.CPU.RunSys
	r.CPU.RunFrames += o.CPU.RunFrames
	r.CPU.MaxRSSKiB += o.CPU.MaxRSSKiB
	r.summarize()
}

// summarize recomputes the derived figures (summaries, per-request CPU) from the raw ones.
func (r *Result) summarize() {
	r.Latency = r.LatencyHist.Summarize()
	r.HeartbeatRTT = r.HeartbeatHist.Summarize()
	r.ConnectTime = r.ConnectHist.Summarize()
	r.FirstReply = r.FirstReplyHist.Summarize()
	run := r.CPU.RunUser + r.CPU.RunSys
	r.CPU.PerRequest, r.CPU.PerFrame = 0, 0
	if r.Sent > 0 {
		r.CPU.PerRequest = run / time.Duration(r.Sent)
	}
	if r.CPU.RunFrames > 0 {
		r.CPU.PerFrame = run / time.Duration(r.CPU.RunFrames)
	}
}

// Snapshot is the running state handed to the progress callback once per second. Counts are
// cumulative since the start of the run; P50/P99 and Window cover the last interval only.
type Snapshot struct {
	Elapsed         time.Duration `json:"elapsed_ns"`
	Phase           string        `json:"phase"` // "connect", "run" or "drain"
	ConnsOpen       int           `json:"conns_open"`
	ConnectFailures int           `json:"connect_failures"`
	Sent            uint64        `json:"sent"`
	OK              uint64        `json:"ok"`
	Errors          uint64        `json:"errors"` // non-20 status and exceptions
	Timeouts        uint64        `json:"timeouts"`
	Lost            uint64        `json:"lost"`
	Unsent          uint64        `json:"unsent"`
	HeartbeatsSent  uint64        `json:"heartbeats_sent"`
	HeartbeatsOK    uint64        `json:"heartbeats_ok"`
	Resets          uint64        `json:"resets"`
	ClosedByPeer    uint64        `json:"closed_by_peer"`
	Readonly        uint64        `json:"readonly"`
	CPU             time.Duration `json:"cpu_ns"` // user+sys of this process so far
	P50             time.Duration `json:"p50_ns"`
	P99             time.Duration `json:"p99_ns"`
	// Window is the latency histogram of the last interval. It is reused: valid only during the
	// callback; Merge it into your own Histogram to keep it.
	Window *hist.Histogram `json:"window,omitempty"`
}

// Add sums o into s (progress from several workers): counts add, Elapsed and CPU take the max and sum,
// and the window histograms merge into dst, from which P50/P99 are recomputed.
func (s *Snapshot) Add(o Snapshot, dst *hist.Histogram) {
	s.Elapsed = max(s.Elapsed, o.Elapsed)
	if s.Phase == "" || phaseOrder(o.Phase) < phaseOrder(s.Phase) {
		s.Phase = o.Phase
	}
	s.ConnsOpen += o.ConnsOpen
	s.ConnectFailures += o.ConnectFailures
	s.Sent += o.Sent
	s.OK += o.OK
	s.Errors += o.Errors
	s.Timeouts += o.Timeouts
	s.Lost += o.Lost
	s.Unsent += o.Unsent
	s.HeartbeatsSent += o.HeartbeatsSent
	s.HeartbeatsOK += o.HeartbeatsOK
	s.Resets += o.Resets
	s.ClosedByPeer += o.ClosedByPeer
	s.Readonly += o.Readonly
	s.CPU += o.CPU
	if dst != nil && o.Window != nil {
		dst.Merge(o.Window)
		s.Window = dst
		s.P50, s.P99 = dst.Percentile(0.5), dst.Percentile(0.99)
	}
}

func phaseOrder(p string) int {
	switch p {
	case "connect":
		return 0
	case "run":
		return 1
	default:
		return 2
	}
}
