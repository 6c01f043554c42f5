package proxy

import (
	"errors"
	"time"

	"github.com/stormgate/stormgate/internal/varbin"
	"github.com/stormgate/stormgate/proxy/h2"
)

// The consumers of a Snapshot, compact: one binary blob of varints in place of a JSON object per
// consumer connection. encoding/json took ~6 µs to decode one SessionSnapshot object, 60 ms of an
// upgrade's pause at 10,000 consumers (and 28 ms to encode), the pause being what consumers wait;
// the blob takes a fraction of that (BenchmarkSnapshotSessions). A Snapshot is written compact only
// for a binary that reads it (handover.CarriesCompactSessions: SetCompact); one written before it, or
// for a binary before it, has the JSON objects, which UnmarshalBinary reads as it always did.
//
// The blob (internal/varbin): compactVersion, the count of consumers, then each: Proto, FD, Remote, Port, Idle, In,
// Skip, Out, Sent, Partial, and H2 (absent, or present with its ConnState's binary form, Drain, Final
// and its calls: Stream, Age, Head, HeadEnd, In, InEnd, InTrail, Kept (absent, or Head, Body, Trailers,
// Complete), Resending, Resends, NotRunTries, ReqBytes). Integers are varints or uvarints, byte strings
// and strings a length then the bytes, booleans 0 or 1, header fields a count then each name, value
// and Sensitive.

const compactVersion = 1

var errCompact = errors.New("proxy: the handover's consumer blob is not this build's encoding")

// SetCompact says whether MarshalBinary writes the consumers as one blob (the binary that restores the
// snapshot reads it).
func (sn *Snapshot) SetCompact(on bool) { sn.compact = on }

// writeFields and readFields are header fields in the blob: a count, then each name, value and Sensitive.
func writeFields(w *varbin.Writer, fs []h2.HeaderField) {
	w.Uvarint(uint64(len(fs)))
	for _, f := range fs {
		w.String(f.Name)
		w.String(f.Value)
		w.Bool(f.Sensitive)
	}
}

func readFields(r *varbin.Reader) []h2.HeaderField {
	n := r.Count(3)
	if n == 0 {
		return nil
	}
	fs := make([]h2.HeaderField, n)
	for i := range fs {
		fs[i] = h2.HeaderField{Name: r.String(), Value: r.String(), Sensitive: r.Bool()}
	}
	return fs
}

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
		conn, err := st.H2.Conn.MarshalBinary()
		if err != nil {
			return nil, err
		}
		w.Bytes(conn)
		w.Bool(st.H2.Drain)
		w.Bool(st.H2.Final)
		w.Uvarint(uint64(len(st.H2.Calls)))
		for _, c := range st.H2.Calls {
			w.Uvarint(uint64(c.Stream))
			w.Varint(int64(c.Age))
			writeFields(&w, c.Head)
			w.Bool(c.HeadEnd)
			w.Bytes(c.In)
			w.Bool(c.InEnd)
			writeFields(&w, c.InTrail)
			w.Bool(c.Kept != nil)
			if k := c.Kept; k != nil {
				writeFields(&w, k.Head)
				w.Bytes(k.Body)
				writeFields(&w, k.Trailers)
				w.Bool(k.Complete)
			}
			w.Bool(c.Resending)
			w.Varint(int64(c.Resends))
			w.Varint(int64(c.NotRunTries))
			w.Uvarint(c.ReqBytes)
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
		hs := &H2SessionSnapshot{}
		if err := hs.Conn.UnmarshalBinary(r.Bytes()); err != nil {
			return nil, errCompact
		}
		hs.Drain, hs.Final = r.Bool(), r.Bool()
		if n := r.Count(16); n > 0 {
			hs.Calls = make([]H2CallSnapshot, n)
			for j := range hs.Calls {
				c := &hs.Calls[j]
				c.Stream = uint32(r.UvarintMax(1<<31 - 1))
				c.Age = time.Duration(r.Varint())
				c.Head = readFields(r)
				c.HeadEnd = r.Bool()
				c.In = r.Bytes()
				c.InEnd = r.Bool()
				c.InTrail = readFields(r)
				if r.Bool() {
					c.Kept = &H2KeptSnapshot{Head: readFields(r), Body: r.Bytes(), Trailers: readFields(r), Complete: r.Bool()}
				}
				c.Resending = r.Bool()
				c.Resends = int(r.Varint())
				c.NotRunTries = int(r.Varint())
				c.ReqBytes = r.Uvarint()
			}
		}
		st.H2 = hs
	}
	if !r.Done() {
		return nil, errCompact
	}
	return ss, nil
}
