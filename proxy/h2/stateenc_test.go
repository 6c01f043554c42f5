package h2

import (
	"encoding/json"
	"reflect"
	"testing"
)

// everyField is a ConnState with every field set to a value unlike the others, negative where the
// field may be.
func everyField() ConnState {
	return ConnState{
		Role: RoleClient, Phase: "active",
		Local: Settings{HeaderTableSize: 1, EnablePush: true, MaxConcurrentStreams: 2, InitialWindowSize: 3, MaxFrameSize: 4, MaxHeaderListSize: 5},
		Peer:  Settings{HeaderTableSize: 6, MaxConcurrentStreams: 1<<32 - 1, InitialWindowSize: 8, MaxFrameSize: 9, MaxHeaderListSize: 10},
		Acked: true, ConnWin: 11, PeerOpen: 12, OwnOpen: 13, LastPeer: 14, NextOwn: 15, ConnSend: -16,
		ConnRecv: RecvState{Avail: 17, Unacked: -18}, EncUpdate: true, GoAwaySent: true, GoAwayRecv: true,
		GoAwayLast: 19, PeerGoAwayLast: 20, RecentNext: 21, OwedHeaders: -22, Credit: 23, EmptyRun: 24,
		Recent:  []RecentStream{{ID: 25, ResetUs: true}, {ID: 26}},
		Streams: []StreamSnapshot{{ID: 27, State: StateHalfClosedRemote, Send: -28, Recv: RecvState{Avail: 29, Unacked: 30}, HeadersIn: 1, HeadersOut: 2}},
	}
}

// Every field of a ConnState crosses its JSON form unchanged, and a form cut short anywhere, or of
// another version, is refused rather than read as another state.
func TestConnStateEncoding(t *testing.T) {
	st := everyField()
	back := jsonRoundTrip(t, st)
	// Every field is set (a field added to ConnState and not to the form would stay zero).
	v := reflect.ValueOf(back)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("field %s did not cross (or everyField does not set it)", v.Type().Field(i).Name)
		}
	}
	b := st.appendBinary(nil)
	for n := range len(b) {
		if err := back.UnmarshalBinary(b[:n]); err == nil {
			t.Errorf("the form cut to %d of %d bytes was read as a state", n, len(b))
		}
	}
	b[0] = stateFormat + 1
	if err := back.UnmarshalBinary(b); err == nil {
		t.Error("another format version was read")
	}
	for _, bad := range []string{`{}`, `"!!"`, `""`, `"AQ=="`, `12`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s was read as a state", bad)
		}
	}
}

func BenchmarkConnStateJSON(b *testing.B) {
	p := serverAtRest(b)
	st, err := p.srv.Export()
	if err != nil {
		b.Fatal(err)
	}
	js, _ := json.Marshal(st)
	b.Logf("%d bytes of JSON", len(js))
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			var s ConnState
			if err := json.Unmarshal(js, &s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encode", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(st)
		}
	})
}
