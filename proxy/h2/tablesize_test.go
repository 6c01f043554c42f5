package h2

import "testing"

// feed hands every whole frame of b (the client preface first, for a server) to c and returns its events;
// a connection error fails the test.
func feed(t *testing.T, c *Conn, b []byte) []Event {
	t.Helper()
	var evs []Event
	for len(b) > 0 {
		n, ev, err := c.Read(0, b)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if n == 0 {
			t.Fatalf("%d bytes left that are no whole frame", len(b))
		}
		b = b[n:]
		if ev.Kind != EventNone {
			evs = append(evs, ev)
		}
	}
	return evs
}

// exchange moves Output both ways until neither side has anything to say.
func exchange(t *testing.T, client, server *Conn) {
	t.Helper()
	for range 4 {
		co, so := append([]byte(nil), client.Output()...), append([]byte(nil), server.Output()...)
		client.ClearOutput()
		server.ClearOutput()
		if len(co)+len(so) == 0 {
			return
		}
		feed(t, server, co)
		feed(t, client, so)
	}
}

// Two Conns, each announcing SETTINGS_HEADER_TABLE_SIZE = 0 as every Conn does: once the client has the
// server's SETTINGS (and the server the client's ACK), the server's decoder requires a dynamic table size
// update at the start of the next block (RFC 7541 §4.2). The client's stateless encoder must send one, or
// a Conn in the server role (a Stormgate in front of a Stormgate, the Triple echo provider) ends the
// connection with COMPRESSION_ERROR on the first request. Failed first: the block had no update.
func TestHeadersAfterPeerTableSizeZero(t *testing.T) {
	client, server := NewConn(Config{Role: RoleClient}), NewConn(Config{})
	exchange(t, client, server)
	head := []HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/s/m"}, {Name: ":authority", Value: "x"}, {Name: "content-type", Value: "application/grpc"}}
	for i := range 2 { // the second block needs no update, and must decode too
		id, err := client.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		out, err := client.AppendHeaders(nil, id, head, true)
		if err != nil {
			t.Fatal(err)
		}
		evs := feed(t, server, out)
		if len(evs) != 1 || evs[0].Kind != EventHeaders || evs[0].Stream != id {
			t.Fatalf("block %d: events %+v", i, evs)
		}
		if p, _ := Field(evs[0].Fields, HeaderPath); p != "/s/m" {
			t.Fatalf("block %d: :path %q", i, p)
		}
	}

	// The server's answer to the client: the client announced 0 too.
	out, err := server.AppendHeaders(nil, 1, []HeaderField{{Name: ":status", Value: "200"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if evs := feed(t, client, out); len(evs) != 1 || evs[0].Kind != EventHeaders {
		t.Fatalf("answer: events %+v", evs)
	}
}
