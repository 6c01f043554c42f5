package h2

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// TestStaticTable checks the table against x/net's decoder: index i decodes to entry i.
func TestStaticTable(t *testing.T) {
	if len(staticTable) != 62 {
		t.Fatalf("static table has %d entries, want 61", len(staticTable)-1)
	}
	d := hpack.NewDecoder(4096, nil)
	for i := 1; i < len(staticTable); i++ {
		fs, err := d.DecodeFull(appendVarInt(nil, 7, 0x80, uint64(i)))
		if err != nil || len(fs) != 1 || fs[0].Name != staticTable[i].name || fs[0].Value != staticTable[i].value {
			t.Fatalf("index %d: %v %v, table has %v", i, fs, err, staticTable[i])
		}
	}
}

var sampleFields = []HeaderField{
	{Name: ":method", Value: "POST"},
	{Name: ":scheme", Value: "http"},
	{Name: ":path", Value: "/org.stormgate.Greeter/Echo"},
	{Name: ":authority", Value: "127.0.0.1:20000"},
	{Name: "content-type", Value: "application/grpc+proto"},
	{Name: "te", Value: "trailers"},
	{Name: "user-agent", Value: "grpc-go/1.84.0"},
	{Name: "grpc-timeout", Value: "2999m"},
	{Name: "x-custom-bin", Value: "AAEC"},
	{Name: "authorization", Value: "secret", Sensitive: true},
	{Name: "x-long", Value: strings.Repeat("v", 300)},
	{Name: "x-raw", Value: "\x7f\x01~~~"},
}

// TestAppendFieldsStateless: what AppendFields writes decodes, with x/net's decoder, to the same fields
// whatever that decoder's dynamic table holds, and never adds to it.
func TestAppendFieldsStateless(t *testing.T) {
	block := AppendFields(nil, sampleFields)
	// A decoder whose table is full of unrelated entries.
	var warm bytes.Buffer
	enc := hpack.NewEncoder(&warm)
	for i := 0; i < 50; i++ {
		_ = enc.WriteField(hpack.HeaderField{Name: "x-fill", Value: strings.Repeat("f", i)})
	}
	for _, table := range []uint32{0, 4096} {
		d := hpack.NewDecoder(table, nil)
		if table > 0 {
			if _, err := d.DecodeFull(warm.Bytes()); err != nil {
				t.Fatal(err)
			}
		}
		got, err := d.DecodeFull(block)
		if err != nil {
			t.Fatalf("table %d: %v", table, err)
		}
		if !reflect.DeepEqual(got, sampleFields) {
			t.Fatalf("table %d: got %v", table, got)
		}
		// Nothing was indexed: decoding the block again gives the same (an indexed literal would shift
		// every dynamic index).
		again, err := d.DecodeFull(block)
		if err != nil || !reflect.DeepEqual(again, sampleFields) {
			t.Fatalf("second decode: %v %v", again, err)
		}
	}
	// Fully static fields are one byte each.
	if b := AppendField(nil, HeaderField{Name: ":method", Value: "POST"}); !bytes.Equal(b, []byte{0x83}) {
		t.Fatalf(":method POST = %x", b)
	}
	// Sensitive ones use the never-indexed form even when the static table has them.
	if b := AppendField(nil, HeaderField{Name: ":method", Value: "POST", Sensitive: true}); b[0]&0xf0 != 0x10 {
		t.Fatalf("sensitive = %x", b)
	}
}

// TestHeaderDecoderTableSize: before the peer acks SETTINGS_HEADER_TABLE_SIZE = 0 its blocks may index into
// the default table; after, the table is empty (a peer's size update is optional: HAProxy 2.6 sends none),
// and larger updates are refused.
func TestHeaderDecoderTableSize(t *testing.T) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf) // the peer's encoder: default 4,096-byte table
	block := func(fs ...HeaderField) []byte {
		buf.Reset()
		for _, f := range fs {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		return append([]byte(nil), buf.Bytes()...)
	}
	d := NewHeaderDecoder(0)
	f := HeaderField{Name: "x-token", Value: "abc"}
	for i := 0; i < 3; i++ { // the second and third use the dynamic table
		got, over, err := d.Decode(block(f))
		if err != nil || over || len(got) != 1 || got[0] != f {
			t.Fatalf("pre-ack block %d: %v %v %v", i, got, over, err)
		}
	}
	d.TableSizeAcked(0)
	enc.SetMaxDynamicTableSize(0) // an honest peer: the next block starts with a size update
	if got, _, err := d.Decode(block(f)); err != nil || len(got) != 1 || got[0] != f {
		t.Fatalf("post-ack block: %v %v", got, err)
	}

	// A peer that acks but sends no size update and never uses the dynamic table (HAProxy 2.6's
	// backend, Jetty 12): its blocks decode, and the table is empty from the ack on all the same.
	d2 := NewHeaderDecoder(0)
	d2.TableSizeAcked(0)
	for i := range 2 {
		got, _, err := d2.Decode(AppendFields(nil, []HeaderField{{Name: ":method", Value: "POST"}, f}))
		if err != nil || len(got) != 2 || got[1] != f {
			t.Fatalf("stateless block %d without an update: %v %v", i, got, err)
		}
	}
	// Such a peer that does use its table cannot make Stormgate decode a wrong list: an entry it
	// indexed before the ack, or adds after it, is gone, and a reference to it (index 62, one byte)
	// ends the connection.
	var fresh bytes.Buffer
	_ = hpack.NewEncoder(&fresh).WriteField(f) // literal with incremental indexing: the entry at 62
	for _, c := range []struct {
		name          string
		before, after [][]byte
	}{
		{"entry from before the ack", [][]byte{fresh.Bytes()}, [][]byte{{0xbe}}},
		{"entry added after the ack", nil, [][]byte{fresh.Bytes(), {0xbe}}},
	} {
		d := NewHeaderDecoder(0)
		for _, b := range c.before {
			if _, _, err := d.Decode(b); err != nil {
				t.Fatalf("%s: before: %v", c.name, err)
			}
		}
		d.TableSizeAcked(0)
		var err error
		for _, b := range c.after {
			if _, _, err = d.Decode(b); err != nil {
				break
			}
		}
		if verdict(err) != "conn:COMPRESSION_ERROR" {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	// A peer that grows the table beyond what was acked.
	d3 := NewHeaderDecoder(0)
	d3.TableSizeAcked(0)
	if _, _, err := d3.Decode(appendVarInt(nil, 5, 0x20, 4096)); verdict(err) != "conn:COMPRESSION_ERROR" {
		t.Fatalf("growing update: %v", err)
	}
}

// TestHeaderDecoderListBound: a list over the bound is reported, and the decoder stays in step (the next
// block, which uses the dynamic table entries the big one added, decodes).
func TestHeaderDecoderListBound(t *testing.T) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for i := 0; i < 10; i++ {
		_ = enc.WriteField(HeaderField{Name: "x-k", Value: strings.Repeat("a", 100) + string(rune('0'+i))})
	}
	big := append([]byte(nil), buf.Bytes()...)
	buf.Reset()
	_ = enc.WriteField(HeaderField{Name: "x-k", Value: strings.Repeat("a", 100) + "9"}) // indexed now
	small := append([]byte(nil), buf.Bytes()...)
	d := NewHeaderDecoder(500)
	if _, over, err := d.Decode(big); err != nil || !over {
		t.Fatalf("big: over=%v err=%v", over, err)
	}
	got, over, err := d.Decode(small)
	if err != nil || over || len(got) != 1 || !strings.HasSuffix(got[0].Value, "9") {
		t.Fatalf("small: %v %v %v", got, over, err)
	}
	if _, _, err := d.Decode([]byte{0xff, 0xff}); verdict(err) != "conn:COMPRESSION_ERROR" {
		t.Fatalf("garbage: %v", err)
	}
}

// TestListSize: the decoder's bound and ListSize count a list alike (names, values, 32 a field).
func TestListSize(t *testing.T) {
	fs := []HeaderField{{Name: ":path", Value: "/a.B/C"}, {Name: "x-k", Value: strings.Repeat("v", 100)}}
	if got, want := ListSize(fs), 5+6+32+3+100+32; got != want {
		t.Fatalf("ListSize = %d, want %d", got, want)
	}
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range fs {
		_ = enc.WriteField(f)
	}
	if _, over, _ := NewHeaderDecoder(uint32(ListSize(fs))).Decode(buf.Bytes()); over {
		t.Error("a list of exactly the bound is over it")
	}
	if _, over, _ := NewHeaderDecoder(uint32(ListSize(fs) - 1)).Decode(buf.Bytes()); !over {
		t.Error("a list one byte over the bound is not over it")
	}
	if ListSize(nil) != 0 {
		t.Error("an empty list has a size")
	}
}

func TestAssembler(t *testing.T) {
	block := AppendFields(nil, sampleFields)
	frames := AppendHeaderBlock(nil, 5, block, true, 64)
	a := NewAssembler(4096, 100)
	var got []byte
	for buf := frames; len(buf) > 0; {
		h, n, err := Split(buf, 0)
		if err != nil || n == 0 {
			t.Fatal(err, n)
		}
		b, end, done, err := a.Add(h, buf[FrameHeaderLen:n])
		if err != nil {
			t.Fatal(err)
		}
		if done {
			if !end {
				t.Fatal("END_STREAM lost")
			}
			got = b
		}
		buf = buf[n:]
	}
	if !bytes.Equal(got, block) {
		t.Fatal("block differs")
	}
	// Bounds: bytes and CONTINUATION count.
	a = NewAssembler(100, 2)
	_, _, _, _ = a.Add(FrameHeader{Type: FrameHeaders, StreamID: 1}, make([]byte, 60))
	if _, _, _, err := a.Add(FrameHeader{Type: FrameContinuation, StreamID: 1}, make([]byte, 60)); err != errBlockTooLarge {
		t.Fatalf("bytes: %v", err)
	}
	a = NewAssembler(100, 2)
	_, _, _, _ = a.Add(FrameHeader{Type: FrameHeaders, StreamID: 1}, nil)
	_, _, _, _ = a.Add(FrameHeader{Type: FrameContinuation, StreamID: 1}, nil)
	_, _, _, _ = a.Add(FrameHeader{Type: FrameContinuation, StreamID: 1}, nil)
	if _, _, _, err := a.Add(FrameHeader{Type: FrameContinuation, StreamID: 1}, nil); err != errTooManyContinuals {
		t.Fatalf("count: %v", err)
	}
	a = NewAssembler(100, 2)
	_, _, _, _ = a.Add(FrameHeader{Type: FrameHeaders, StreamID: 1}, nil)
	if _, _, _, err := a.Add(FrameHeader{Type: FrameContinuation, StreamID: 3}, nil); err != errContinuationWrong {
		t.Fatalf("stream: %v", err)
	}
	if _, _, _, err := NewAssembler(100, 2).Add(FrameHeader{Type: FrameContinuation, StreamID: 1}, nil); err != errContinuationLone {
		t.Fatalf("lone: %v", err)
	}
}

func TestCheckSections(t *testing.T) {
	req := sampleFields[:8]
	if !CheckRequestHeaders(req) {
		t.Fatal("valid request refused")
	}
	bad := map[string][]HeaderField{
		"upper-case name":   append(cloneFields(req), HeaderField{Name: "X-Up", Value: "v"}),
		"pseudo after":      append(cloneFields(req), HeaderField{Name: ":path", Value: "/a/b"}),
		"connection header": append(cloneFields(req), HeaderField{Name: "connection", Value: "close"}),
		"te gzip":           append(cloneFields(req[:5]), HeaderField{Name: "te", Value: "gzip"}),
		"no path":           {{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}},
		"empty path":        {{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path"}},
		"connect":           {{Name: ":method", Value: "CONNECT"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: "/"}},
		"status in request": append([]HeaderField{{Name: ":status", Value: "200"}}, req...),
		"value newline":     append(cloneFields(req), HeaderField{Name: "x", Value: "a\nb"}),
		"value space":       append(cloneFields(req), HeaderField{Name: "x", Value: " a"}),
	}
	for name, fs := range bad {
		if CheckRequestHeaders(fs) {
			t.Errorf("%s accepted", name)
		}
	}
	if !CheckResponseHeaders([]HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"}}) ||
		CheckResponseHeaders([]HeaderField{{Name: ":status", Value: "20"}}) ||
		!CheckTrailers([]HeaderField{{Name: "grpc-status", Value: "0"}}) ||
		CheckTrailers([]HeaderField{{Name: ":status", Value: "200"}}) {
		t.Fatal("response/trailers rules")
	}
}

func cloneFields(fs []HeaderField) []HeaderField { return append([]HeaderField(nil), fs...) }

func TestGRPCHelpers(t *testing.T) {
	if s, m, ok := ServiceMethod("/org.stormgate.Greeter/Echo"); !ok || s != "org.stormgate.Greeter" || m != "Echo" {
		t.Fatal(s, m, ok)
	}
	for _, p := range []string{"", "/", "//", "/a/", "//b", "a/b", "/a/b/c"} {
		if _, _, ok := ServiceMethod(p); ok {
			t.Errorf("%q accepted", p)
		}
	}
	tr := ErrorTrailers(false, GRPCUnavailable, "provider lost: 100% gone\n")
	code, msg, ok := GRPCStatus(tr)
	if !ok || code != 14 || msg != "provider lost: 100% gone\n" {
		t.Fatalf("%v %q %v", code, msg, ok)
	}
	if !CheckResponseHeaders(tr) || CheckTrailers(tr) || !CheckTrailers(ErrorTrailers(true, 13, "x")) {
		t.Fatal("error trailers shape")
	}
	if v, _ := Field(tr, HeaderGRPCMessage); strings.ContainsAny(v, "%\n") && !strings.Contains(v, "%25") {
		t.Fatalf("not percent-encoded: %q", v)
	}
}
