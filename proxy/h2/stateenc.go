package h2

import (
	"encoding/base64"
	"errors"

	"github.com/stormgate/stormgate/internal/varbin"
)

// ConnState's encoding in a handover's JSON: a string holding a compact binary form (base64), not an
// object. encoding/json took 32 µs to decode one ConnState object (its reflection over ~60 fields,
// the recent ring's included): 160 ms of an upgrade's pause at 5,000 HTTP/2 consumers, where the
// whole Dubbo snapshot of 10,000 decodes in 22 ms. This form decodes in 2.8 µs, most of it base64 and
// JSON's scan of the string (BenchmarkConnStateJSON).
//
// The form (internal/varbin: every integer a varint or uvarint, a bool 0 or 1, a string its length then
// its bytes): stateFormat, Role, Phase, Local and Peer (six fields each, in Settings' order), Acked, ConnWin,
// PeerOpen, OwnOpen, LastPeer, NextOwn, ConnSend, ConnRecv (Avail, Unacked), EncUpdate, GoAwaySent,
// GoAwayRecv, GoAwayLast, PeerGoAwayLast, RecentNext, OwedHeaders, Credit, EmptyRun, then the count of
// Recent and each (ID, ResetUs), then the count of Streams and each (ID, State, Send, Recv.Avail,
// Recv.Unacked, HeadersIn, HeadersOut). A decoder refuses another stateFormat: the handover format's
// version (handover.Format) covers this one.

// stateFormat is the version of ConnState's binary form.
const stateFormat = 1

var errStateEncoding = errors.New("h2: a connection state that is not this build's encoding")

// MarshalJSON encodes st as a JSON string of its binary form.
func (st ConnState) MarshalJSON() ([]byte, error) {
	b := st.appendBinary(make([]byte, 0, 128))
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(b))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, b)
	return append(out, '"'), nil
}

// UnmarshalJSON decodes what MarshalJSON wrote. It checks the encoding only: RestoreConn checks the state.
func (st *ConnState) UnmarshalJSON(js []byte) error {
	if len(js) < 2 || js[0] != '"' || js[len(js)-1] != '"' {
		return errStateEncoding
	}
	b, err := base64.StdEncoding.AppendDecode(nil, js[1:len(js)-1])
	if err != nil {
		return errStateEncoding
	}
	return st.UnmarshalBinary(b)
}

// MarshalBinary is the binary form itself (what MarshalJSON carries), for an owner that encodes its own
// handover state compactly.
func (st ConnState) MarshalBinary() ([]byte, error) { return st.appendBinary(nil), nil }

// UnmarshalBinary decodes MarshalBinary's form. It checks the encoding only: RestoreConn checks the state.
func (st *ConnState) UnmarshalBinary(b []byte) error {
	r := varbin.NewReader(b)
	*st = parseState(r)
	if !r.Done() {
		return errStateEncoding
	}
	return nil
}

func (st *ConnState) appendBinary(b []byte) []byte {
	w := varbin.Writer{B: b}
	settings := func(s Settings) {
		w.Uvarint(uint64(s.HeaderTableSize))
		w.Bool(s.EnablePush)
		w.Uvarint(uint64(s.MaxConcurrentStreams))
		w.Uvarint(uint64(s.InitialWindowSize))
		w.Uvarint(uint64(s.MaxFrameSize))
		w.Uvarint(uint64(s.MaxHeaderListSize))
	}
	w.Uvarint(stateFormat)
	w.Uvarint(uint64(st.Role))
	w.String(st.Phase)
	settings(st.Local)
	settings(st.Peer)
	w.Bool(st.Acked)
	w.Uvarint(uint64(st.ConnWin))
	w.Varint(int64(st.PeerOpen))
	w.Varint(int64(st.OwnOpen))
	w.Uvarint(uint64(st.LastPeer))
	w.Uvarint(uint64(st.NextOwn))
	w.Varint(st.ConnSend)
	w.Varint(st.ConnRecv.Avail)
	w.Varint(st.ConnRecv.Unacked)
	w.Bool(st.EncUpdate)
	w.Bool(st.GoAwaySent)
	w.Bool(st.GoAwayRecv)
	w.Uvarint(uint64(st.GoAwayLast))
	w.Uvarint(uint64(st.PeerGoAwayLast))
	w.Varint(int64(st.RecentNext))
	w.Varint(st.OwedHeaders)
	w.Varint(int64(st.Credit))
	w.Varint(int64(st.EmptyRun))
	w.Uvarint(uint64(len(st.Recent)))
	for _, r := range st.Recent {
		w.Uvarint(uint64(r.ID))
		w.Bool(r.ResetUs)
	}
	w.Uvarint(uint64(len(st.Streams)))
	for _, s := range st.Streams {
		w.Uvarint(uint64(s.ID))
		w.Uvarint(uint64(s.State))
		w.Varint(s.Send)
		w.Varint(s.Recv.Avail)
		w.Varint(s.Recv.Unacked)
		w.Uvarint(uint64(s.HeadersIn))
		w.Uvarint(uint64(s.HeadersOut))
	}
	return w.B
}

// parseState reads appendBinary's form; r.Bad after it says whether it was out of place.
func parseState(r *varbin.Reader) ConnState {
	var st ConnState
	u32 := func() uint32 { return uint32(r.UvarintMax(1<<32 - 1)) }
	u8 := func() uint8 { return uint8(r.UvarintMax(255)) }
	settings := func() Settings {
		return Settings{HeaderTableSize: u32(), EnablePush: r.Bool(), MaxConcurrentStreams: u32(),
			InitialWindowSize: u32(), MaxFrameSize: u32(), MaxHeaderListSize: u32()}
	}
	if r.Uvarint() != stateFormat {
		r.Fail()
		return st
	}
	st.Role = Role(u8())
	st.Phase = r.String()
	st.Local = settings()
	st.Peer = settings()
	st.Acked = r.Bool()
	st.ConnWin = u32()
	st.PeerOpen = int(r.Varint())
	st.OwnOpen = int(r.Varint())
	st.LastPeer = u32()
	st.NextOwn = u32()
	st.ConnSend = r.Varint()
	st.ConnRecv = RecvState{Avail: r.Varint(), Unacked: r.Varint()}
	st.EncUpdate = r.Bool()
	st.GoAwaySent = r.Bool()
	st.GoAwayRecv = r.Bool()
	st.GoAwayLast = u32()
	st.PeerGoAwayLast = u32()
	st.RecentNext = int(r.Varint())
	st.OwedHeaders = r.Varint()
	st.Credit = int(r.Varint())
	st.EmptyRun = int(r.Varint())
	if n := r.Count(2); n > 0 {
		st.Recent = make([]RecentStream, n)
		for i := range st.Recent {
			st.Recent[i] = RecentStream{ID: u32(), ResetUs: r.Bool()}
		}
	}
	if n := r.Count(7); n > 0 {
		st.Streams = make([]StreamSnapshot, n)
		for i := range st.Streams {
			st.Streams[i] = StreamSnapshot{ID: u32(), State: StreamState(u8()), Send: r.Varint(),
				Recv: RecvState{Avail: r.Varint(), Unacked: r.Varint()}, HeadersIn: u8(), HeadersOut: u8()}
		}
	}
	return st
}
