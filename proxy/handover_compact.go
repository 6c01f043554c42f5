package proxy

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/stormgate/stormgate/proxy/h2"
)

// The consumers of a Snapshot, compact: one binary blob of varints in place of a JSON object per
// consumer connection. encoding/json took ~6 µs to decode one SessionSnapshot object, 60 ms of an
// upgrade's pause at 10,000 consumers (and 28 ms to encode), the pause being what consumers wait;
// the blob takes a fraction of that (BenchmarkSnapshotSessions). A Snapshot is written compact only
// for a binary that reads it (handover.CarriesCompactSessions: SetCompact); one written before it, or
// for a binary before it, has the JSON objects, which UnmarshalBinary reads as it always did.
//
// The blob: compactVersion, the count of consumers, then each: Proto, FD, Remote, Port, Idle, In,
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

// enc appends the binary form.
type enc struct{ b []byte }

func (e *enc) u(x uint64) { e.b = binary.AppendUvarint(e.b, x) }
func (e *enc) v(x int64)  { e.b = binary.AppendVarint(e.b, x) }
func (e *enc) bytes(p []byte) {
	e.u(uint64(len(p)))
	e.b = append(e.b, p...)
}
func (e *enc) str(s string) {
	e.u(uint64(len(s)))
	e.b = append(e.b, s...)
}
func (e *enc) bool(x bool) {
	if x {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}
func (e *enc) fields(fs []h2.HeaderField) {
	e.u(uint64(len(fs)))
	for _, f := range fs {
		e.str(f.Name)
		e.str(f.Value)
		e.bool(f.Sensitive)
	}
}

// dec reads it; bad sticks once anything is out of place.
type dec struct {
	b   []byte
	bad bool
}

func (d *dec) u() uint64 {
	x, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return x
}

func (d *dec) v() int64 {
	x, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return x
}

// raw is the next length-prefixed bytes, aliasing the blob (nil when empty).
func (d *dec) raw() []byte {
	n := d.u()
	if d.bad || n > uint64(len(d.b)) {
		d.bad, d.b = true, nil
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	if n == 0 {
		return nil
	}
	return p
}

func (d *dec) str() string { return string(d.raw()) }
func (d *dec) bool() bool  { return d.u() == 1 }

// count is a count of items of at least min bytes each, bounded by what is left.
func (d *dec) count(min int) int {
	n := d.u()
	if n > uint64(len(d.b)/min) {
		d.bad, d.b = true, nil
		return 0
	}
	return int(n)
}

func (d *dec) fields() []h2.HeaderField {
	n := d.count(3)
	if n == 0 {
		return nil
	}
	fs := make([]h2.HeaderField, n)
	for i := range fs {
		fs[i] = h2.HeaderField{Name: d.str(), Value: d.str(), Sensitive: d.bool()}
	}
	return fs
}

// appendSessions encodes the consumers.
func appendSessions(b []byte, ss []SessionSnapshot) ([]byte, error) {
	e := enc{b: b}
	e.u(compactVersion)
	e.u(uint64(len(ss)))
	for i := range ss {
		st := &ss[i]
		e.str(st.Proto)
		e.v(int64(st.FD))
		e.str(st.Remote)
		e.u(uint64(st.Port))
		e.v(int64(st.Idle))
		e.bytes(st.In)
		e.v(int64(st.Skip))
		e.bytes(st.Out)
		e.v(int64(st.Sent))
		e.v(int64(st.Partial))
		e.bool(st.H2 != nil)
		if st.H2 == nil {
			continue
		}
		conn, err := st.H2.Conn.MarshalBinary()
		if err != nil {
			return nil, err
		}
		e.bytes(conn)
		e.bool(st.H2.Drain)
		e.bool(st.H2.Final)
		e.u(uint64(len(st.H2.Calls)))
		for _, c := range st.H2.Calls {
			e.u(uint64(c.Stream))
			e.v(int64(c.Age))
			e.fields(c.Head)
			e.bool(c.HeadEnd)
			e.bytes(c.In)
			e.bool(c.InEnd)
			e.fields(c.InTrail)
			e.bool(c.Kept != nil)
			if k := c.Kept; k != nil {
				e.fields(k.Head)
				e.bytes(k.Body)
				e.fields(k.Trailers)
				e.bool(k.Complete)
			}
			e.bool(c.Resending)
			e.v(int64(c.Resends))
			e.v(int64(c.NotRunTries))
			e.u(c.ReqBytes)
		}
	}
	return e.b, nil
}

// parseSessions decodes what appendSessions wrote. Byte fields alias b.
func parseSessions(b []byte) ([]SessionSnapshot, error) {
	d := dec{b: b}
	if d.u() != compactVersion {
		return nil, errCompact
	}
	ss := make([]SessionSnapshot, d.count(12))
	for i := range ss {
		st := &ss[i]
		st.Proto = d.str()
		st.FD = int(d.v())
		st.Remote = d.str()
		st.Port = uint16(d.u())
		st.Idle = time.Duration(d.v())
		st.In = d.raw()
		st.Skip = int(d.v())
		st.Out = d.raw()
		st.Sent = int(d.v())
		st.Partial = time.Duration(d.v())
		if !d.bool() {
			continue
		}
		hs := &H2SessionSnapshot{}
		if err := hs.Conn.UnmarshalBinary(d.raw()); err != nil && !d.bad {
			return nil, err
		}
		hs.Drain, hs.Final = d.bool(), d.bool()
		if n := d.count(16); n > 0 {
			hs.Calls = make([]H2CallSnapshot, n)
			for j := range hs.Calls {
				c := &hs.Calls[j]
				c.Stream = uint32(d.u())
				c.Age = time.Duration(d.v())
				c.Head = d.fields()
				c.HeadEnd = d.bool()
				c.In = d.raw()
				c.InEnd = d.bool()
				c.InTrail = d.fields()
				if d.bool() {
					c.Kept = &H2KeptSnapshot{Head: d.fields(), Body: d.raw(), Trailers: d.fields(), Complete: d.bool()}
				}
				c.Resending = d.bool()
				c.Resends = int(d.v())
				c.NotRunTries = int(d.v())
				c.ReqBytes = d.u()
			}
		}
		st.H2 = hs
	}
	if d.bad || len(d.b) > 0 {
		return nil, errCompact
	}
	return ss, nil
}
