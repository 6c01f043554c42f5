package h2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var okHead = []HeaderField{{Name: ":status", Value: "200"}}

func body(n int) []byte { return bytes.Repeat([]byte{'b'}, n) }

// serverAtRest builds a consumer-side Conn (p.srv) with streams in every state a quiesced connection can
// hold, its Output written and read by the client: stream 1 half-closed (remote) with an answer that has
// used part of its window, its body consumed and not yet acknowledged on the connection; 3 closed
// normally; 5 reset by this side; 7 reset by the peer; 9 open with DATA partly consumed (unacknowledged
// on the stream) and one empty DATA frame after it (emptyRun); 11 half-closed
// (remote) with an answer blocked on a window that a SETTINGS decrease took below zero; the peer's
// SETTINGS lowered HEADER_TABLE_SIZE (a table size update is owed); a graceful GOAWAY was sent.
func serverAtRest(t testing.TB) *pair {
	t.Helper()
	p := newPair(t, Config{InitialWindowSize: 3000}, Config{InitialWindowSize: 4000, ConnWindowSize: 100000, MaxConcurrentStreams: 10})
	open, answer := p.request, p.answer
	open(true, 1500)                // 1
	p.must(p.srv.Consumed(1, 1500)) // the stream's remote side is closed: the connection's window only
	answer(1, 1000, false)
	open(true, 0) // 3
	answer(3, 10, true)
	open(false, 0) // 5
	p.must(p.srv.Reset(5, ErrCodeCancel))
	p.toCli(nil)
	open(false, 200) // 7
	p.must(p.cli.Reset(7, ErrCodeCancel))
	p.toSrv(nil)
	open(false, 500) // 9
	p.must(p.srv.Consumed(9, 300))
	open(true, 0) // 11
	answer(11, 5000, false)
	if w := p.srv.SendWindow(11); w != 0 {
		t.Fatalf("stream 11's window %d, want it used up", w)
	}
	// The peer lowers its initial window below what stream 11 already used, and its table size.
	p.toSrv(AppendSettings(nil, Setting{SettingInitialWindowSize, 2500}))
	p.toSrv(AppendSettings(nil, Setting{SettingHeaderTableSize, 4096}))
	p.toSrv(AppendSettings(nil, Setting{SettingHeaderTableSize, 100}))
	p.toSrv(dataFrame(9, false, 0))
	p.srv.GoAwayGracefully("upgrade", [8]byte{'g'})
	p.flush()
	return p
}

// clientAtRest is serverAtRest for a provider-side Conn (p.cli): 1 half-closed (local) with part of the
// answer consumed and not yet acknowledged; 3 closed normally; 5 reset by this side with its answer still
// owed (owedHeaders); 7 reset by the peer; 9 open with request DATA blocked on a window a SETTINGS decrease
// took below zero; 11 open, head only. goAway: this side also sent a GOAWAY.
func clientAtRest(t testing.TB, goAway bool) *pair {
	t.Helper()
	p := newPair(t, Config{InitialWindowSize: 2000}, Config{InitialWindowSize: 3000, MaxConcurrentStreams: 10})
	open, answer := p.request, p.answer
	open(true, 1000) // 1
	answer(1, 1500, false)
	p.must(p.cli.Consumed(1, 600))
	open(true, 0) // 3
	answer(3, 0, true)
	open(false, 0) // 5
	answer(5, 0, false)
	p.must(p.cli.Reset(5, ErrCodeCancel))
	p.toSrv(nil)
	open(false, 0) // 7
	p.must(p.srv.Reset(7, ErrCodeCancel))
	p.toCli(nil)
	id := open(false, 0) // 9
	out, n, err := p.cli.AppendData(p.now, nil, id, body(4000), false)
	p.must(err)
	if n != 3000 {
		t.Fatalf("sent %d on stream 9, want the peer's window", n)
	}
	p.toSrv(out)
	open(false, 0) // 11
	p.toCli(AppendSettings(nil, Setting{SettingInitialWindowSize, 2000}))
	if goAway {
		p.cli.GoAway(ErrCodeNo, "upgrade")
	}
	p.flush()
	return p
}

// request has the client open a stream with a request head and n bytes of body, END_STREAM when end,
// and delivers them to the server.
func (p *pair) request(end bool, n int) uint32 {
	p.t.Helper()
	id, err := p.cli.OpenStream()
	p.must(err)
	out, err := p.cli.AppendHeaders(nil, id, request("/s/m"), end && n == 0)
	p.must(err)
	if n > 0 {
		out, _, err = p.cli.AppendData(p.now, out, id, body(n), end)
		p.must(err)
	}
	p.toSrv(out)
	return id
}

// answer has the server answer stream id with a head and n bytes (as many as the windows take), END_STREAM
// when end, and delivers them to the client.
func (p *pair) answer(id uint32, n int, end bool) {
	p.t.Helper()
	out, err := p.srv.AppendHeaders(nil, id, okHead, end && n == 0)
	p.must(err)
	if n > 0 {
		out, _, err = p.srv.AppendData(p.now, out, id, body(n), end)
		p.must(err)
	}
	p.toCli(out)
}

func (p *pair) must(err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
}

// step is one move of a continuation: the peer's frames, or an owner's call whose results are printed.
type step struct {
	in []byte
	do func(c *Conn, now int64) string
}

func peer(frames ...[]byte) step { return step{in: bytes.Join(frames, nil)} }

func owner(f func(c *Conn, now int64) string) step { return step{do: f} }

func sendData(id uint32, n int, end bool) step {
	return owner(func(c *Conn, now int64) string {
		out, sent, err := c.AppendData(now, nil, id, body(n), end)
		return fmt.Sprintf("%x %d %v", out, sent, err)
	})
}

func sendHeaders(id uint32, fields []HeaderField, end bool) step {
	return owner(func(c *Conn, now int64) string {
		out, err := c.AppendHeaders(nil, id, fields, end)
		return fmt.Sprintf("%x %v", out, err)
	})
}

func consumed(id uint32, n int) step {
	return owner(func(c *Conn, _ int64) string { return fmt.Sprint(c.Consumed(id, n)) })
}

var openStream = owner(func(c *Conn, now int64) string {
	id, err := c.OpenStream()
	if err != nil {
		return err.Error()
	}
	out, err := c.AppendHeaders(nil, id, request("/s/m"), true)
	return fmt.Sprintf("%d %x %v", id, out, err)
})

// handOver exports c at rest, passes the state through JSON as the upgrade does, and restores it with a
// Config that shares only the role and Limits with the original's: the rest comes from the state.
func handOver(t *testing.T, c *Conn, role Role) *Conn {
	t.Helper()
	st, err := c.Export()
	if err != nil {
		t.Fatal(err)
	}
	back := jsonRoundTrip(t, st)
	r, err := RestoreConn(Config{Role: role}, back)
	if err != nil {
		t.Fatalf("RestoreConn: %v\n%+v", err, back)
	}
	if again, err := r.Export(); err != nil || !reflect.DeepEqual(again, st) {
		t.Fatalf("the restored Conn exports another state (%v):\n%+v\n%+v", err, st, again)
	}
	return r
}

// jsonRoundTrip passes st through JSON and requires it unchanged.
func jsonRoundTrip(t *testing.T, st ConnState) ConnState {
	t.Helper()
	js, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back ConnState
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, st) {
		t.Fatalf("JSON changed the state:\n got %+v\nwant %+v", back, st)
	}
	return back
}

// sameBehaviour runs steps on the original Conn and the restored one and requires the same events, errors,
// Output bytes, owner results, and stream states and send windows for every id up to maxID, after every
// step; at the end both export the same state (or failed the same way).
func sameBehaviour(t *testing.T, orig, rest *Conn, now int64, steps []step) {
	t.Helper()
	const maxID = 40
	for i, s := range steps {
		now += 1e6
		if s.in != nil {
			evA, errA := readAll(t, orig, now, s.in)
			evB, errB := readAll(t, rest, now, s.in)
			if !reflect.DeepEqual(evA, evB) || fmt.Sprint(errA) != fmt.Sprint(errB) {
				t.Fatalf("step %d: original %+v %v, restored %+v %v", i, evA, errA, evB, errB)
			}
		} else if a, b := s.do(orig, now), s.do(rest, now); a != b {
			t.Fatalf("step %d: original %s, restored %s", i, a, b)
		}
		if !bytes.Equal(orig.Output(), rest.Output()) {
			t.Fatalf("step %d: Output %x, restored %x", i, orig.Output(), rest.Output())
		}
		orig.ClearOutput()
		rest.ClearOutput()
		for id := uint32(0); id <= maxID; id++ {
			if a, b := orig.StreamState(id), rest.StreamState(id); a != b {
				t.Fatalf("step %d: stream %d %v, restored %v", i, id, a, b)
			}
			if a, b := orig.SendWindow(id), rest.SendWindow(id); a != b {
				t.Fatalf("step %d: stream %d send window %d, restored %d", i, id, a, b)
			}
		}
		if orig.OpenStreams() != rest.OpenStreams() || orig.CanOpenStream() != rest.CanOpenStream() ||
			fmt.Sprint(orig.Err()) != fmt.Sprint(rest.Err()) {
			t.Fatalf("step %d: open %d/%d, can open %v/%v, err %v/%v", i, orig.OpenStreams(), rest.OpenStreams(),
				orig.CanOpenStream(), rest.CanOpenStream(), orig.Err(), rest.Err())
		}
	}
	if orig.Err() != nil {
		return
	}
	a, errA := orig.Export()
	b, errB := rest.Export()
	if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("after the continuation:\n%+v %v\n%+v %v", a, errA, b, errB)
	}
}

func TestRestoreBehavesAsOriginalServer(t *testing.T) {
	req := request("/s/m")
	cases := map[string][]step{
		"data windows resets new stream": {
			peer(dataFrame(9, false, 1500)),
			consumed(9, 1700), // with the 300 consumed before the handover: a stream WINDOW_UPDATE
			peer(AppendWindowUpdate(nil, 11, 1000)),
			sendData(11, 2000, true), // the waiting answer: 500 bytes of window
			peer(AppendWindowUpdate(nil, 0, 5000)),
			sendData(1, 3000, true),
			sendHeaders(9, okHead, false),                  // begins with the table size update the peer's SETTINGS asked for
			peer(AppendRSTStream(nil, 3, ErrCodeCancel)),   // a recently closed stream
			peer(AppendRSTStream(nil, 1, ErrCodeCancel)),   // the peer cancels a stream being answered
			peer(headersFrame(13, true, req)),              // a new stream, higher id
			peer(dataFrame(5, false, 100)),                 // in flight when this side reset 5: ignored
			peer(dataFrame(3, false, 100)),                 // on a closed stream: RST_STREAM STREAM_CLOSED
			peer(AppendPing(nil, false, [8]byte{1, 2, 3})), // answered in place
			peer(dataFrame(9, false, 0), dataFrame(9, false, 0)),
		},
		"headers on a stream the peer reset": {
			peer(headersFrame(7, false, req)),
		},
		"empty frames go on counting": { // the run of 1 crosses: the 8th more is one too many
			peer(bytes.Repeat(dataFrame(9, false, 0), 7)),
			peer(dataFrame(9, false, 0)),
		},
		"stream id going backwards": {
			peer(headersFrame(21, false, req)),
			peer(headersFrame(15, false, req)),
		},
		"frames on closed streams": {
			peer(AppendWindowUpdate(nil, 3, 10), AppendWindowUpdate(nil, 7, 10)),
			peer(dataFrame(1, false, 10)), // half-closed (remote): STREAM_CLOSED
			peer(headersFrame(3, true, req)),
		},
		"decoder starts acknowledged and empty": {
			peer(AppendHeaderBlock(nil, 13, append([]byte{0x20}, AppendFields(nil, req)...), true, 0)),
			peer(AppendHeaderBlock(nil, 15, append([]byte{0x3f, 0xe1, 0x1f}, AppendFields(nil, req)...), true, 0)),
		},
		"dynamic table reference": {
			peer(AppendHeaderBlock(nil, 13, []byte{0xbe}, true, 0)),
		},
		"idle stream": {
			peer(AppendWindowUpdate(nil, 99, 1)),
		},
	}
	for name, steps := range cases {
		t.Run(name, func(t *testing.T) {
			p := serverAtRest(t)
			r := handOver(t, p.srv, RoleServer)
			sameBehaviour(t, p.srv, r, p.now, steps)
		})
	}
}

func TestRestoreBehavesAsOriginalClient(t *testing.T) {
	trailers := []HeaderField{{Name: "grpc-status", Value: "0"}}
	cases := map[string]struct {
		goAway bool
		steps  []step
	}{
		"data windows owed heads new stream": {steps: []step{
			peer(dataFrame(1, false, 400)),
			consumed(1, 400), // with the 600 consumed before: a WINDOW_UPDATE
			peer(AppendWindowUpdate(nil, 9, 1500)),
			sendData(9, 1000, false), // the waiting request body: 500 bytes of window
			peer(AppendWindowUpdate(nil, 0, 5000)),
			peer(headersFrame(5, false, okHead), headersFrame(5, true, trailers)), // owed: ignored, free
			peer(headersFrame(5, true, trailers)),                                 // no longer owed: costs the budget
			peer(AppendRSTStream(nil, 3, ErrCodeCancel)),
			peer(headersFrame(1, true, trailers)),
			openStream,
			openStream,
			peer(AppendPing(nil, false, [8]byte{9})),
			peer(AppendGoAway(nil, 13, ErrCodeNo, "bye"), AppendGoAway(nil, 15, ErrCodeNo, "")),
			openStream,
			peer(dataFrame(13, true, 0)),
		}},
		"goaway sent": {goAway: true, steps: []step{
			openStream,
			peer(headersFrame(11, false, okHead), dataFrame(11, false, 10)),
			sendHeaders(11, trailers, true),
			peer(dataFrame(11, true, 10)),
		}},
		"idle own stream": {steps: []step{
			peer(AppendWindowUpdate(nil, 15, 1)),
		}},
		"headers on a closed stream": {steps: []step{
			peer(headersFrame(3, false, okHead)), // ended normally: the peer knows it is closed
		}},
		"even stream id": {steps: []step{
			peer(headersFrame(2, false, okHead)),
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := clientAtRest(t, tc.goAway)
			r := handOver(t, p.cli, RoleClient)
			sameBehaviour(t, p.cli, r, p.now, tc.steps)
		})
	}
}

// TestRestoreKeepsRecentSlots: the memory of closed streams has wrapped, and stream 61 is in it twice:
// closed normally (slot 30), then reset by this side when the peer sent DATA on it (slot 1). The first
// slot answers, so HEADERS on 61 are ignored, not a connection error: a restore that kept the entries in
// the order they were closed, rather than slot by slot, would end the connection there.
func TestRestoreKeepsRecentSlots(t *testing.T) {
	req := request("/s/m")
	for name, steps := range map[string][]step{
		"duplicate answered by its first slot": {
			peer(headersFrame(61, true, req)),
			peer(dataFrame(61, true, 10)),
			peer(headersFrame(63, true, req)), // slot 31, closed normally: the connection ends
		},
		"forgotten stream": {
			peer(dataFrame(1, false, 10)), // closed, no longer remembered: RST_STREAM STREAM_CLOSED
			peer(headersFrame(1, true, req)),
		},
	} {
		t.Run(name, func(t *testing.T) {
			p := newPair(t, Config{}, Config{})
			for range maxRecentClosed + 1 { // streams 1..65: 65 overwrites 1 in slot 0
				p.answer(p.request(true, 0), 0, true)
			}
			p.toSrv(dataFrame(61, false, 10))
			if found, resetUs := p.srv.recentlyClosed(61); !found || !resetUs || p.srv.recent[30].id != 61 {
				t.Fatalf("the ring is not what the test needs: %+v next %d", p.srv.recent, p.srv.recentIdx)
			}
			r := handOver(t, p.srv, RoleServer)
			sameBehaviour(t, p.srv, r, p.now, steps)
		})
	}
}

// TestRestoreCarriesTheState checks the scenario built what the differential tests claim to cover.
func TestRestoreCarriesTheState(t *testing.T) {
	st, err := serverAtRest(t).srv.Export()
	if err != nil {
		t.Fatal(err)
	}
	byID := map[uint32]StreamSnapshot{}
	for _, s := range st.Streams {
		byID[s.ID] = s
	}
	if s := byID[1]; s.State != StateHalfClosedRemote || s.Send != 1500 {
		t.Errorf("stream 1: %+v", s)
	}
	if s := byID[11]; s.State != StateHalfClosedRemote || s.Send != -500 {
		t.Errorf("stream 11: %+v", s)
	}
	if s := byID[9]; s.State != StateOpen || s.Recv.Avail != 3500 || s.Recv.Unacked != 300 || s.Send != 2500 {
		t.Errorf("stream 9: %+v", s)
	}
	if len(st.Streams) != 3 || st.PeerOpen != 3 || st.LastPeer != 11 || !st.GoAwaySent || st.GoAwayLast != MaxStreamID ||
		!st.EncUpdate || st.EmptyRun != 1 || st.ConnRecv.Unacked != 1800 || st.Peer.InitialWindowSize != 2500 {
		t.Errorf("state %+v", st)
	}
	recent := map[RecentStream]bool{}
	for _, r := range st.Recent {
		recent[r] = true
	}
	if !recent[RecentStream{ID: 3}] || !recent[RecentStream{ID: 5, ResetUs: true}] || !recent[RecentStream{ID: 7}] {
		t.Errorf("recent %+v", st.Recent)
	}
	cst, err := clientAtRest(t, true).cli.Export()
	if err != nil {
		t.Fatal(err)
	}
	if cst.OwedHeaders != 2 || cst.NextOwn != 13 || cst.OwnOpen != 3 || !cst.GoAwaySent || cst.LastPeer != 0 {
		t.Errorf("client state %+v", cst)
	}
}

// TestRestoredStallRestarts: the stall clock does not cross (it is the old process's); the owner re-arms
// it by offering the waiting answer again.
func TestRestoredStallRestarts(t *testing.T) {
	p := serverAtRest(t)
	if _, ok := p.srv.NextStall(); !ok {
		t.Fatal("stream 11 is not waiting for a window in the original")
	}
	r := handOver(t, p.srv, RoleServer)
	if _, ok := r.NextStall(); ok {
		t.Fatal("the restored Conn has a stall time from the old clock")
	}
	if _, n, err := r.AppendData(5, nil, 11, body(10), false); err != nil || n != 0 {
		t.Fatal(n, err)
	}
	if at, ok := r.NextStall(); !ok || at != 5+int64(DefaultLimits().StallTimeout) {
		t.Fatalf("stall at %d %v", at, ok)
	}
}

// TestRestoreTakesLimitsFromConfig: the guards' bounds are the new process's (cfg.Limits), not the state's:
// a run of one empty frame crosses, and a bound of one makes the next one too many.
func TestRestoreTakesLimitsFromConfig(t *testing.T) {
	st, err := serverAtRest(t).srv.Export()
	if err != nil {
		t.Fatal(err)
	}
	for bound, want := range map[int]string{1: "conn:ENHANCE_YOUR_CALM", 2: ""} {
		c, err := RestoreConn(Config{Limits: Limits{MaxEmptyFrames: bound}}, st)
		if err != nil {
			t.Fatal(err)
		}
		_, err = readAll(t, c, 1, dataFrame(9, false, 0))
		if got := verdict(err); got != want {
			t.Errorf("MaxEmptyFrames %d: %s, want %s", bound, got, want)
		}
	}
}

func TestExportRefusesNotAtRest(t *testing.T) {
	cases := map[string]struct {
		conn func(t *testing.T) *Conn
		why  string
	}{
		"output not written": {func(t *testing.T) *Conn {
			d := serverDriver(t, Config{})
			d.c.Ping([8]byte{1})
			return d.c
		}, "Output"},
		"header block in progress": {func(t *testing.T) *Conn {
			d := serverDriver(t, Config{})
			d.in.Write(AppendFrameHeader(nil, FrameHeader{Type: FrameHeaders, StreamID: 1}))
			d.pump()
			return d.c
		}, "CONTINUATION"},
		"preface pending": {func(t *testing.T) *Conn {
			c := NewConn(Config{})
			c.ClearOutput()
			return c
		}, "preface"},
		"first SETTINGS pending": {func(t *testing.T) *Conn {
			c := NewConn(Config{Role: RoleClient})
			c.ClearOutput()
			return c
		}, "SETTINGS"},
		"SETTINGS not acknowledged": {func(t *testing.T) *Conn {
			d := newDriver(t, Config{})
			d.in.WriteString(ClientPreface)
			d.must(d.fr.WriteSettings())
			d.pump()
			return d.c
		}, "acknowledged"},
		"failed": {func(t *testing.T) *Conn {
			d := serverDriver(t, Config{})
			d.in.Write(AppendWindowUpdate(nil, 99, 1))
			d.pump()
			if d.err == nil {
				t.Fatal("no connection error")
			}
			return d.c
		}, "failed"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := tc.conn(t)
			out := append([]byte(nil), c.Output()...)
			_, err := c.Export()
			if !errors.Is(err, ErrNotAtRest) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Export: %v, want ErrNotAtRest saying %q", err, tc.why)
			}
			if !bytes.Equal(out, c.Output()) {
				t.Fatal("Export changed Output")
			}
		})
	}
	// At rest, Export twice gives the same state: it changes nothing.
	d := serverDriver(t, Config{})
	a, errA := d.c.Export()
	b, errB := d.c.Export()
	if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
		t.Fatal(a, errA, b, errB)
	}
}

func TestRestoreRejectsInvalidState(t *testing.T) {
	srv, err := serverAtRest(t).srv.Export()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientAtRest(t, false).cli.Export()
	if err != nil {
		t.Fatal(err)
	}
	stream := func(st *ConnState, id uint32) *StreamSnapshot {
		for i := range st.Streams {
			if st.Streams[i].ID == id {
				return &st.Streams[i]
			}
		}
		t.Fatalf("no stream %d", id)
		return nil
	}
	cases := map[string]struct {
		client bool
		role   Role // of the Config
		mutate func(st *ConnState)
	}{
		"role not the Config's":       {role: RoleClient, mutate: func(st *ConnState) {}},
		"unknown role":                {role: 7, mutate: func(st *ConnState) { st.Role = 7 }},
		"phase not active":            {mutate: func(st *ConnState) { st.Phase = "settings" }},
		"unknown phase":               {mutate: func(st *ConnState) { st.Phase = "" }},
		"settings not acknowledged":   {mutate: func(st *ConnState) { st.Acked = false }},
		"header table not 0":          {mutate: func(st *ConnState) { st.Local.HeaderTableSize = 4096 }},
		"local window too large":      {mutate: func(st *ConnState) { st.Local.InitialWindowSize = MaxWindowSize + 1 }},
		"peer window too large":       {mutate: func(st *ConnState) { st.Peer.InitialWindowSize = 1 << 31 }},
		"peer frame size":             {mutate: func(st *ConnState) { st.Peer.MaxFrameSize = 100 }},
		"local frame size":            {mutate: func(st *ConnState) { st.Local.MaxFrameSize = 1 << 24 }},
		"no header list bound":        {mutate: func(st *ConnState) { st.Local.MaxHeaderListSize = 0 }},
		"connection window too large": {mutate: func(st *ConnState) { st.ConnWin = 1 << 31 }},
		"connection window too small": {mutate: func(st *ConnState) { st.ConnWin = 1000 }},
		"send window too large":       {mutate: func(st *ConnState) { st.ConnSend = MaxWindowSize + 1 }},
		"send window negative":        {mutate: func(st *ConnState) { st.ConnSend = -1 }},
		"recv avail too large":        {mutate: func(st *ConnState) { st.ConnRecv.Avail = 1 << 31 }},
		"recv unacked negative":       {mutate: func(st *ConnState) { st.ConnRecv.Unacked = -1 }},
		"stream send too large":       {mutate: func(st *ConnState) { stream(st, 1).Send = MaxWindowSize + 1 }},
		"stream send too small":       {mutate: func(st *ConnState) { stream(st, 1).Send = -MaxWindowSize - 1 }},
		"stream recv too large":       {mutate: func(st *ConnState) { stream(st, 9).Recv.Avail = 1 << 40 }},
		"stream unacked too large":    {mutate: func(st *ConnState) { stream(st, 9).Recv.Unacked = 1 << 31 }},
		"unknown stream state":        {mutate: func(st *ConnState) { stream(st, 9).State = 9 }},
		"idle stream tracked":         {mutate: func(st *ConnState) { stream(st, 9).State = StateIdle }},
		"closed stream tracked":       {mutate: func(st *ConnState) { stream(st, 9).State = StateClosed }},
		"even stream for a server":    {mutate: func(st *ConnState) { stream(st, 9).ID = 10 }},
		"stream id 0":                 {mutate: func(st *ConnState) { stream(st, 9).ID = 0 }},
		"stream above lastPeer":       {mutate: func(st *ConnState) { stream(st, 9).ID = 13 }},
		"duplicate stream":            {mutate: func(st *ConnState) { stream(st, 9).ID = 1 }},
		"peer open count":             {mutate: func(st *ConnState) { st.PeerOpen = 2 }},
		"own open count":              {mutate: func(st *ConnState) { st.OwnOpen = 1 }},
		"more open than allowed":      {mutate: func(st *ConnState) { st.Local.MaxConcurrentStreams = 2 }},
		"lastPeer even":               {mutate: func(st *ConnState) { st.LastPeer = 12 }},
		"server opened streams":       {mutate: func(st *ConnState) { st.NextOwn = 3 }},
		"goaway last without goaway":  {mutate: func(st *ConnState) { st.GoAwaySent = false }},
		"goaway last too large":       {mutate: func(st *ConnState) { st.GoAwayLast = 1 << 31 }},
		"stream above goaway last":    {mutate: func(st *ConnState) { st.GoAwayLast = 9 }},
		"peer goaway without goaway":  {mutate: func(st *ConnState) { st.PeerGoAwayLast = 5 }},
		"owed headers on a server":    {mutate: func(st *ConnState) { st.OwedHeaders = 2 }},
		"credit above the bound":      {mutate: func(st *ConnState) { st.Credit = maxCredit + 1 }},
		"credit negative":             {mutate: func(st *ConnState) { st.Credit = -1 }},
		"empty run negative":          {mutate: func(st *ConnState) { st.EmptyRun = -1 }},
		"recent too long":             {mutate: func(st *ConnState) { st.Recent = make([]RecentStream, maxRecentClosed+1) }},
		"recent next out of range":    {mutate: func(st *ConnState) { st.RecentNext = maxRecentClosed }},
		"recent above lastPeer":       {mutate: func(st *ConnState) { st.Recent[0].ID = 101 }},
		"recent still open":           {mutate: func(st *ConnState) { st.Recent[0].ID = 9 }},

		"client: peer stream":          {client: true, role: RoleClient, mutate: func(st *ConnState) { stream(st, 9).ID = 2 }},
		"client: lastPeer":             {client: true, role: RoleClient, mutate: func(st *ConnState) { st.LastPeer = 2 }},
		"client: stream above nextOwn": {client: true, role: RoleClient, mutate: func(st *ConnState) { stream(st, 9).ID = 13 }},
		"client: nextOwn even":         {client: true, role: RoleClient, mutate: func(st *ConnState) { st.NextOwn = 14 }},
		"client: nextOwn beyond ids":   {client: true, role: RoleClient, mutate: func(st *ConnState) { st.NextOwn = MaxStreamID + 4 }},
		"client: owed negative":        {client: true, role: RoleClient, mutate: func(st *ConnState) { st.OwedHeaders = -1 }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			base := srv
			if tc.client {
				base = cli
			}
			// A deep copy through JSON: the mutation must not reach the other cases.
			js, _ := json.Marshal(base)
			var st ConnState
			if err := json.Unmarshal(js, &st); err != nil {
				t.Fatal(err)
			}
			if _, err := RestoreConn(Config{Role: base.Role}, st); err != nil {
				t.Fatalf("the unchanged state is refused: %v", err)
			}
			tc.mutate(&st)
			role := base.Role
			if tc.role != 0 || tc.client {
				role = tc.role
			}
			c, err := RestoreConn(Config{Role: role}, st)
			if err == nil || c != nil {
				t.Fatalf("restored %+v", st)
			}
		})
	}
}

// A client connection that opened its last stream id has none left (OwnStreamIDsLeft), and can open no
// stream after it: its owner replaces it.
func TestOwnStreamIDsUsedUp(t *testing.T) {
	p := newPair(t, Config{}, Config{})
	p.flush()
	st, err := p.cli.Export()
	if err != nil {
		t.Fatal(err)
	}
	st.NextOwn = MaxStreamID - 2 // two ids left
	cli, err := RestoreConn(Config{Role: RoleClient}, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []uint32{MaxStreamID - 2, MaxStreamID} {
		if !cli.OwnStreamIDsLeft() || !cli.CanOpenStream() {
			t.Fatalf("before stream %d: ids left %v, can open %v", want, cli.OwnStreamIDsLeft(), cli.CanOpenStream())
		}
		if id, err := cli.OpenStream(); err != nil || id != want {
			t.Fatalf("OpenStream: %d %v, want %d", id, err, want)
		}
	}
	if cli.OwnStreamIDsLeft() || cli.CanOpenStream() {
		t.Fatal("after the last id: ids left or a stream to open")
	}
	if _, err := cli.OpenStream(); err != ErrNoStream {
		t.Fatalf("OpenStream after the last id: %v", err)
	}
}
