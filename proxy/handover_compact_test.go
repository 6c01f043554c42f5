package proxy

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stormgate/stormgate/proxy/h2"
)

// compactSample is a Snapshot with every kind of consumer and every field set.
func compactSample(n int) *Snapshot {
	conn := h2.ConnState{Role: h2.RoleServer, Phase: "active", Acked: true, ConnWin: 1 << 20, LastPeer: 7, NextOwn: 2,
		ConnSend: 65535, ConnRecv: h2.RecvState{Avail: 1000, Unacked: 12},
		Streams: []h2.StreamSnapshot{{ID: 7, State: h2.StateHalfClosedRemote, Send: 100, Recv: h2.RecvState{Avail: 5}}}}
	head := []h2.HeaderField{{Name: ":path", Value: "/svc/Method"}, {Name: "x-secret", Value: "s", Sensitive: true}}
	sn := &Snapshot{Taken: time.Unix(1700000000, 5).UTC(), Pools: []PoolSnapshot{{Addr: "127.0.0.1:1", Port: 1}}}
	for i := range n {
		st := SessionSnapshot{FD: 100 + i, Remote: fmt.Sprintf("127.0.0.1:%d", 40000+i), Port: uint16(i),
			Idle: time.Duration(i) * time.Millisecond, Out: []byte("out"), Sent: 1}
		switch i % 3 {
		case 0: // Dubbo, mid-frame
			st.In, st.Skip, st.Partial = []byte{0xda, 0xbb}, 3, time.Second
		case 1: // undecided
			st.Proto, st.In = SnapUnknown, []byte("PRI")
		case 2: // HTTP/2 with a waiting call that is being sent again, and one that is not kept
			st.Proto = SnapH2
			st.H2 = &H2SessionSnapshot{Conn: conn, Drain: true, Final: true, Calls: []H2CallSnapshot{
				{Stream: 5, Age: time.Millisecond, Head: head, HeadEnd: false, In: []byte("body"), InEnd: true,
					InTrail: []h2.HeaderField{{Name: "t", Value: "1"}}, Resending: true, Resends: 2, NotRunTries: 1, ReqBytes: 4,
					Kept: &H2KeptSnapshot{Head: head, Body: []byte("body"), Trailers: []h2.HeaderField{{Name: "t", Value: "1"}}, Complete: true}},
				{Stream: 7, Age: -time.Microsecond, Head: head, HeadEnd: true},
			}}
		}
		sn.Sessions = append(sn.Sessions, st)
	}
	return sn
}

// A snapshot written compact reads back field for field as the same snapshot written as JSON objects,
// and a consumer blob cut anywhere is refused, never read as other consumers.
func TestSnapshotCompactSessions(t *testing.T) {
	sn := compactSample(6)
	var plain, compact Snapshot
	b, err := sn.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	sn.SetCompact(true)
	c, err := sn.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := compact.UnmarshalBinary(c); err != nil {
		t.Fatal(err)
	}
	for _, x := range []*Snapshot{&plain, &compact} {
		x.decoded, x.size = 0, 0
	}
	if !reflect.DeepEqual(compact, plain) {
		t.Fatalf("compact and JSON differ:\ncompact %+v\n   JSON %+v", compact, plain)
	}
	if !reflect.DeepEqual(compact.Sessions[2].H2, sn.Sessions[2].H2) || len(compact.FDs()) != 6 {
		t.Fatalf("HTTP/2 consumer: %+v", compact.Sessions[2].H2)
	}
	blob, err := appendSessions(nil, sn.Sessions)
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(blob) {
		if _, err := parseSessions(blob[:n]); err == nil {
			t.Fatalf("the blob cut to %d of %d bytes was read", n, len(blob))
		}
	}
}

// BenchmarkSnapshotSessions: decoding 10,000 consumers (a third of them HTTP/2), as JSON objects and
// compact.
func BenchmarkSnapshotSessions(b *testing.B) {
	sn := compactSample(10000)
	for _, compact := range []bool{false, true} {
		sn.SetCompact(compact)
		enc, err := sn.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("compact=%v/decode", compact), func(b *testing.B) {
			b.ReportMetric(float64(len(enc)), "bytes")
			for b.Loop() {
				var x Snapshot
				if err := x.UnmarshalBinary(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("compact=%v/encode", compact), func(b *testing.B) {
			for b.Loop() {
				if _, err := sn.MarshalBinary(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
