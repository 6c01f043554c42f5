package proxy

import (
	"errors"
	"time"

	"github.com/stormgate/stormgate/internal/varbin"
	"github.com/stormgate/stormgate/proxy/h2snap"
)

// The consumers of a Snapshot, compact: one binary blob of varints in place of a JSON object per
// consumer connection. encoding/json took ~6 µs to decode one SessionSnapshot object, 60 ms of an
// upgrade's pause at 10,000 consumers (and 28 ms to encode), the pause being what consumers wait;
// the blob takes a fraction of that (BenchmarkSnapshotSessions). A Snapshot is written compact only
// for a binary that reads it (handover.CarriesCompactSessions: SetCompact); one written before it, or
// for a binary before it, has the JSON objects, which UnmarshalBinary reads as it always did.
//
// The blob (internal/varbin): compactVersion, the count of consumers, then each: Proto, FD, Remote, Port, Idle, In,
// Skip, Out, Sent, Partial, and H2 (absent, or present in h2snap.Append's form). Integers are varints
// or uvarints, byte strings and strings a length then the bytes, booleans 0 or 1.

const compactVersion = 1

var errCompact = errors.New("proxy: the handover's consumer blob is not this build's encoding")

// SetCompact says whether MarshalBinary writes the consumers as one blob (the binary that restores the
// snapshot reads it).
func (sn *Snapshot) SetCompact(on bool) { sn.compact = on }

// appendSessions encodes the consumers.
func appendSessions(b []byte, ss []SessionSnapshot) ([]byte, error) {
	w := varbin.Writer{B: b}
	w.Uvarint(compactVersion)
	w.Uvarint(uint64(len(ss)))
	for i := range ss {
		st := &ss[i]
		w.String(st.Proto)
		w.Varint(int64(st.FD))
		w.String(st.Remote)
		w.Uvarint(uint64(st.Port))
		w.Varint(int64(st.Idle))
		w.Bytes(st.In)
		w.Varint(int64(st.Skip))
		w.Bytes(st.Out)
		w.Varint(int64(st.Sent))
		w.Varint(int64(st.Partial))
		w.Bool(st.H2 != nil)
		if st.H2 == nil {
			continue
		}
		if err := h2snap.Append(&w, st.H2); err != nil {
			return nil, err
		}
	}
	return w.B, nil
}

// parseSessions decodes what appendSessions wrote. Byte fields alias b.
func parseSessions(b []byte) ([]SessionSnapshot, error) {
	r := varbin.NewReader(b)
	if r.Uvarint() != compactVersion {
		return nil, errCompact
	}
	ss := make([]SessionSnapshot, r.Count(12))
	for i := range ss {
		st := &ss[i]
		st.Proto = r.String()
		st.FD = int(r.Varint())
		st.Remote = r.String()
		st.Port = uint16(r.UvarintMax(1<<16 - 1))
		st.Idle = time.Duration(r.Varint())
		st.In = r.Bytes()
		st.Skip = int(r.Varint())
		st.Out = r.Bytes()
		st.Sent = int(r.Varint())
		st.Partial = time.Duration(r.Varint())
		if !r.Bool() {
			continue
		}
		hs, err := h2snap.Parse(r)
		if err != nil {
			return nil, errCompact
		}
		st.H2 = hs
	}
	if !r.Done() {
		return nil, errCompact
	}
	return ss, nil
}
