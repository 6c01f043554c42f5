package h2snap

import (
	"time"

	"github.com/stormgate/stormgate/internal/varbin"
	"github.com/stormgate/stormgate/proxy/h2"
)

// Session is an HTTP/2 consumer connection at rest.
type Session struct {
	Conn  h2.ConnState `json:"conn"`
	Drain bool         `json:"drain,omitempty"` // Stormgate's drain: the first GOAWAY went out
	Final bool         `json:"final,omitempty"` // and the final one
	Calls []Call       `json:"calls,omitempty"` // calls waiting for a provider stream, oldest first
}

// Call is one call waiting for a provider stream.
type Call struct {
	Stream      uint32           `json:"stream"`
	Age         time.Duration    `json:"age"` // since it arrived (hold.timeout and grpc-timeout count from then)
	Head        []h2.HeaderField `json:"head"`
	HeadEnd     bool             `json:"head_end,omitempty"`
	In          []byte           `json:"in,omitempty"` // request DATA still to send (its connection window went back: waitingConnBack)
	InEnd       bool             `json:"in_end,omitempty"`
	InTrail     []h2.HeaderField `json:"in_trail,omitempty"` // from older builds only (trailers were forwarded): read as InEnd
	Kept        *Kept            `json:"kept,omitempty"`     // nil: not kept (too large): never sent again
	Resending   bool             `json:"resending,omitempty"`
	Resends     int              `json:"resends,omitempty"`
	NotRunTries int              `json:"not_run_tries,omitempty"`
	ReqBytes    uint64           `json:"req_bytes,omitempty"`
}

// Kept is a call's request kept for sending it again.
type Kept struct {
	Head     []h2.HeaderField `json:"head"`
	Body     []byte           `json:"body,omitempty"`
	Trailers []h2.HeaderField `json:"trailers,omitempty"` // from older builds only: read as Complete
	Complete bool             `json:"complete,omitempty"`
}

// Append writes hs in the compact blob's form (internal/varbin): its ConnState's binary form, Drain,
// Final and its calls: Stream, Age, Head, HeadEnd, In, InEnd, InTrail, Kept (absent, or Head, Body,
// Trailers, Complete), Resending, Resends, NotRunTries, ReqBytes. Header fields are a count, then each
// name, value and Sensitive.
func Append(w *varbin.Writer, hs *Session) error {
	conn, err := hs.Conn.MarshalBinary()
	if err != nil {
		return err
	}
	w.Bytes(conn)
	w.Bool(hs.Drain)
	w.Bool(hs.Final)
	w.Uvarint(uint64(len(hs.Calls)))
	for _, c := range hs.Calls {
		w.Uvarint(uint64(c.Stream))
		w.Varint(int64(c.Age))
		writeFields(w, c.Head)
		w.Bool(c.HeadEnd)
		w.Bytes(c.In)
		w.Bool(c.InEnd)
		writeFields(w, c.InTrail)
		w.Bool(c.Kept != nil)
		if k := c.Kept; k != nil {
			writeFields(w, k.Head)
			w.Bytes(k.Body)
			writeFields(w, k.Trailers)
			w.Bool(k.Complete)
		}
		w.Bool(c.Resending)
		w.Varint(int64(c.Resends))
		w.Varint(int64(c.NotRunTries))
		w.Uvarint(c.ReqBytes)
	}
	return nil
}

// Parse reads what Append wrote. Byte fields alias r's input. A ConnState that does not decode is an
// error; the rest of what is malformed shows in r (r.Bad), as the caller checks it.
func Parse(r *varbin.Reader) (*Session, error) {
	hs := &Session{}
	if err := hs.Conn.UnmarshalBinary(r.Bytes()); err != nil {
		return nil, err
	}
	hs.Drain, hs.Final = r.Bool(), r.Bool()
	if n := r.Count(16); n > 0 {
		hs.Calls = make([]Call, n)
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
				c.Kept = &Kept{Head: readFields(r), Body: r.Bytes(), Trailers: readFields(r), Complete: r.Bool()}
			}
			c.Resending = r.Bool()
			c.Resends = int(r.Varint())
			c.NotRunTries = int(r.Varint())
			c.ReqBytes = r.Uvarint()
		}
	}
	return hs, nil
}

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
