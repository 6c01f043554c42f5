package h2

import "errors"

// Origin names a consumer stream: the owner's id for the consumer connection, and the stream's id there.
type Origin struct {
	Conn   uint64
	Stream uint32
}

// ErrIDReused is StreamMap.Bind's answer to an upstream id that is not above every id bound before: HTTP/2
// never reuses a stream id (RFC 9113 §5.1.1), so neither does the map.
var ErrIDReused = errors.New("h2: upstream stream id not above every earlier one")

// StreamMap maps one upstream connection's streams to the consumer streams they carry, both ways: the
// HTTP/2 form of the Dubbo request-id rewrite. Upstream ids come from Conn.OpenStream (odd, increasing);
// the map refuses an id that is not above every id it bound before, so a stale answer can never be routed
// to a newer stream. The zero value is ready to use. One goroutine at a time.
type StreamMap struct {
	up   map[uint32]Origin
	down map[Origin]uint32
	last uint32
}

// Bind records that upstream stream up carries the consumer stream o. o must not be bound already.
func (m *StreamMap) Bind(up uint32, o Origin) error {
	if up <= m.last {
		return ErrIDReused
	}
	if _, dup := m.down[o]; dup {
		return errors.New("h2: consumer stream already bound")
	}
	if m.up == nil {
		m.up = make(map[uint32]Origin)
		m.down = make(map[Origin]uint32)
	}
	m.last = up
	m.up[up] = o
	m.down[o] = up
	return nil
}

// Origin returns the consumer stream an upstream stream carries (an answer's way back).
func (m *StreamMap) Origin(up uint32) (Origin, bool) {
	o, ok := m.up[up]
	return o, ok
}

// Upstream returns the upstream stream that carries consumer stream o (a consumer's DATA, RST_STREAM or
// WINDOW_UPDATE on its way up).
func (m *StreamMap) Upstream(o Origin) (uint32, bool) {
	up, ok := m.down[o]
	return up, ok
}

// Unbind forgets an upstream stream (it ended, either way). Unknown ids are ignored.
func (m *StreamMap) Unbind(up uint32) {
	if o, ok := m.up[up]; ok {
		delete(m.up, up)
		delete(m.down, o)
	}
}

// UnbindConn forgets every stream of a consumer connection and calls fn for each (e.g. to reset the
// upstream stream), in no particular order.
func (m *StreamMap) UnbindConn(conn uint64, fn func(up uint32, o Origin)) {
	for up, o := range m.up {
		if o.Conn == conn {
			delete(m.up, up)
			delete(m.down, o)
			if fn != nil {
				fn(up, o)
			}
		}
	}
}

// Len is the number of bound streams.
func (m *StreamMap) Len() int { return len(m.up) }
