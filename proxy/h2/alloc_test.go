package h2

import "testing"

// The hot paths allocate nothing: frame parsing, a PING answered, DATA received and sent.
func TestHotPathAllocs(t *testing.T) {
	ping := AppendPing(nil, false, [8]byte{1, 2, 3})
	data := frame(FrameData, 0, 1, make([]byte, 512)...)
	hdr := frame(FrameHeaders, FlagEndHeaders|FlagPadded|FlagPriority, 3, 1, 0, 0, 0, 1, 16, 0x82, 0)
	buf := make([]byte, 0, 4096)
	cases := map[string]func(){
		"ParseFrameHeader": func() { _, _ = ParseFrameHeader(data) },
		"Split":            func() { _, _, _ = Split(data, 0) },
		"CheckFrame":       func() { h, _ := ParseFrameHeader(hdr); _ = CheckFrame(h, hdr[9:]) },
		"AppendPing":       func() { buf = AppendPing(buf[:0], true, [8]byte{}) },
		"AppendRSTStream":  func() { buf = AppendRSTStream(buf[:0], 1, ErrCodeCancel) },
		"AppendField":      func() { buf = AppendField(buf[:0], HeaderField{Name: "grpc-status", Value: "14"}) },
	}
	for name, fn := range cases {
		if a := testing.AllocsPerRun(200, fn); a != 0 {
			t.Errorf("%s: %v allocs", name, a)
		}
	}

	d := serverDriver(t, Config{})
	d.headers(1, false, request("/s/m")...)
	d.pump()
	c := d.c
	now := d.now
	if a := testing.AllocsPerRun(200, func() {
		if n, _, err := c.Read(now, ping); n != len(ping) || err != nil {
			t.Fatal(n, err)
		}
		c.ClearOutput()
		now += 1e9 // an honest rate: one PING a second
	}); a != 0 {
		t.Errorf("PING answered: %v allocs", a)
	}
	if a := testing.AllocsPerRun(200, func() {
		n, ev, err := c.Read(now, data)
		if n != len(data) || err != nil || ev.Kind != EventData {
			t.Fatal(n, ev.Kind, err)
		}
		_ = c.Consumed(1, len(ev.Data))
		c.ClearOutput()
	}); a != 0 {
		t.Errorf("DATA received: %v allocs", a)
	}
	_, _ = c.AppendHeaders(nil, 1, []HeaderField{{Name: ":status", Value: "200"}}, false)
	d.must(d.fr.WriteWindowUpdate(0, 1<<30))
	d.must(d.fr.WriteWindowUpdate(1, 1<<30))
	d.pump()
	body := make([]byte, 512)
	if a := testing.AllocsPerRun(200, func() {
		var n int
		buf, n, _ = c.AppendData(now, buf[:0], 1, body, false)
		if n != len(body) {
			t.Fatal(n)
		}
	}); a != 0 {
		t.Errorf("DATA sent: %v allocs", a)
	}
}

func BenchmarkReadPing(b *testing.B) {
	c := NewConn(Config{Limits: Limits{ControlBurst: 1 << 30}})
	c.ClearOutput()
	in := append([]byte(ClientPreface), AppendSettings(nil)...)
	for len(in) > 0 {
		n, _, err := c.Read(1, in)
		if err != nil || n == 0 {
			b.Fatal(err)
		}
		in = in[n:]
	}
	ping := AppendPing(nil, false, [8]byte{1})
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := c.Read(1, ping); err != nil {
			b.Fatal(err)
		}
		c.ClearOutput()
	}
}

func BenchmarkDecodeRequestHeaders(b *testing.B) {
	block := AppendFields(nil, sampleFields[:8])
	d := NewHeaderDecoder(0)
	b.ReportAllocs()
	b.SetBytes(int64(len(block)))
	for b.Loop() {
		if _, _, err := d.Decode(block); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendFields(b *testing.B) {
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendFields(buf[:0], sampleFields[:8])
	}
}
