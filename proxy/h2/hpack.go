package h2

import (
	"golang.org/x/net/http2/hpack"
)

// HeaderField is one decoded header field (name, value, and whether the peer marked it never-indexed).
type HeaderField = hpack.HeaderField

// fieldOverhead is what RFC 9113 §6.5.2 adds to each field's name and value when sizing a header list.
const fieldOverhead = 32

// ListSize is the size of a header list as §6.5.2 counts it: each field's name and value and 32 bytes.
func ListSize(fields []HeaderField) int {
	n := 0
	for _, f := range fields {
		n += len(f.Name) + len(f.Value) + fieldOverhead
	}
	return n
}

// Errors of header block decoding: the peer's HPACK state and ours no longer agree, so the connection ends
// (§4.3).
var errCompression = connErr(ErrCodeCompression, "HPACK decoding failed")

// HeaderDecoder decodes one connection's header blocks from one peer (one per connection and direction;
// HPACK state is per connection). Stormgate advertises SETTINGS_HEADER_TABLE_SIZE = 0: until the peer
// acknowledges that, its blocks may use the default 4,096-byte dynamic table and decode correctly; once it
// has (TableSizeAcked), the table is emptied and held at the acknowledged size, so a connection keeps no
// header state. RFC 7541 §4.2 has the peer's next block begin with a dynamic table size update; one that
// does not (HAProxy 2.6 as a client, Jetty 12) is decoded all the same, since the decoder's table already
// has the size the update would set. A peer that skips the update and then refers to an entry it believes
// is in its table gets COMPRESSION_ERROR (the entry is not there), never another list than it encoded.
type HeaderDecoder struct {
	dec      *hpack.Decoder
	fields   []HeaderField
	listSize uint64
	maxList  uint64 // 0: no bound
	overList bool
}

// NewHeaderDecoder returns a decoder with the protocol's initial 4,096-byte table. maxHeaderListSize bounds
// the decoded list (§6.5.2's size: names, values and 32 bytes a field); 0 means no bound.
func NewHeaderDecoder(maxHeaderListSize uint32) *HeaderDecoder {
	d := &HeaderDecoder{maxList: uint64(maxHeaderListSize)}
	d.dec = hpack.NewDecoder(DefaultHeaderTableSize, d.emit)
	// A single string cannot be longer than the whole list may be; without a bound hpack would buffer it.
	if maxHeaderListSize > 0 {
		d.dec.SetMaxStringLength(int(maxHeaderListSize))
	}
	return d
}

func (d *HeaderDecoder) emit(f HeaderField) {
	d.listSize += uint64(len(f.Name)) + uint64(len(f.Value)) + fieldOverhead
	if d.maxList > 0 && d.listSize > d.maxList {
		// Keep decoding (the table must stay in step with the peer's) but stop keeping strings.
		d.overList = true
		d.dec.SetEmitEnabled(false)
		return
	}
	d.fields = append(d.fields, f)
}

// TableSizeAcked tells the decoder that the peer acknowledged a SETTINGS_HEADER_TABLE_SIZE of size: larger
// dynamic table size updates are refused from now on, and a table above size shrinks to it at once (the
// entries a shrink evicts are gone whether or not the peer's update follows).
func (d *HeaderDecoder) TableSizeAcked(size uint32) {
	d.dec.SetAllowedMaxDynamicTableSize(size)
	if size < DefaultHeaderTableSize {
		d.dec.SetMaxDynamicTableSize(size)
	}
}

// Decode decodes one whole header block. The fields are valid until the next call. overList reports that
// the decoded list exceeded the bound: fields is then incomplete and must not be forwarded, but the
// decoder is still in step with the peer, so this is a stream error, not a connection error. err is a
// COMPRESSION_ERROR *ConnError.
func (d *HeaderDecoder) Decode(block []byte) (fields []HeaderField, overList bool, err error) {
	d.fields = d.fields[:0]
	d.listSize = 0
	d.overList = false
	d.dec.SetEmitEnabled(true)
	if _, err := d.dec.Write(block); err != nil {
		return nil, false, errCompression
	}
	if err := d.dec.Close(); err != nil {
		return nil, false, errCompression
	}
	return d.fields, d.overList, nil
}

// AppendField appends the stateless HPACK encoding of one field: an index into the static table when name
// and value are there, else a literal that is never added to a dynamic table (sensitive fields use the
// never-indexed form, so an intermediary keeps them out of its tables too), the name as a static index when
// the table has it. Strings are Huffman-coded when that is shorter. The result decodes identically in a
// decoder whose dynamic table holds anything, so no encoder state is needed. It allocates only to grow dst.
func AppendField(dst []byte, f HeaderField) []byte {
	nameIdx, exact := staticLookup(f.Name, f.Value)
	if exact && !f.Sensitive {
		return appendVarInt(dst, 7, 0x80, uint64(nameIdx))
	}
	first := byte(0x00) // literal without indexing (RFC 7541 §6.2.2)
	if f.Sensitive {
		first = 0x10 // literal never indexed (§6.2.3)
	}
	if nameIdx > 0 {
		dst = appendVarInt(dst, 4, first, uint64(nameIdx))
	} else {
		dst = append(dst, first)
		dst = appendString(dst, f.Name)
	}
	return appendString(dst, f.Value)
}

// AppendFields appends the stateless encoding of every field, in order.
func AppendFields(dst []byte, fields []HeaderField) []byte {
	for _, f := range fields {
		dst = AppendField(dst, f)
	}
	return dst
}

// appendVarInt appends the HPACK integer i with an n-bit prefix; first holds the bits above the prefix.
func appendVarInt(dst []byte, n uint8, first byte, i uint64) []byte {
	limit := uint64(1)<<n - 1
	if i < limit {
		return append(dst, first|byte(i))
	}
	dst = append(dst, first|byte(limit))
	i -= limit
	for i >= 128 {
		dst = append(dst, byte(i&0x7f|0x80))
		i >>= 7
	}
	return append(dst, byte(i))
}

func appendString(dst []byte, s string) []byte {
	if hl := hpack.HuffmanEncodeLength(s); hl < uint64(len(s)) {
		dst = appendVarInt(dst, 7, 0x80, hl)
		return hpack.AppendHuffmanString(dst, s)
	}
	dst = appendVarInt(dst, 7, 0, uint64(len(s)))
	return append(dst, s...)
}

// AppendHeaderBlock appends a header block as one HEADERS frame and as many CONTINUATION frames as
// maxFrameSize (the peer's SETTINGS_MAX_FRAME_SIZE; 0 means the default) requires. endStream sets
// END_STREAM on the HEADERS frame.
func AppendHeaderBlock(dst []byte, stream uint32, block []byte, endStream bool, maxFrameSize uint32) []byte {
	if maxFrameSize == 0 {
		maxFrameSize = DefaultMaxFrameSize
	}
	typ, flags := FrameHeaders, Flags(0)
	if endStream {
		flags = FlagEndStream
	}
	for {
		n := min(len(block), int(maxFrameSize))
		f := flags
		if n == len(block) {
			f |= FlagEndHeaders
		}
		dst = AppendFrameHeader(dst, FrameHeader{Length: uint32(n), Type: typ, Flags: f, StreamID: stream})
		dst = append(dst, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return dst
		}
		typ, flags = FrameContinuation, 0
	}
}

// staticLookup finds name (and name+value) in the HPACK static table: nameIdx is the first index with that
// name (0: none), exact whether the entry at nameIdx.. with that value exists (then nameIdx is its index).
func staticLookup(name, value string) (nameIdx int, exact bool) {
	first, ok := staticNames[name]
	if !ok {
		return 0, false
	}
	for i := first; i < len(staticTable) && staticTable[i].name == name; i++ {
		if staticTable[i].value == value {
			return i, true
		}
	}
	return first, false
}

// staticTable is RFC 7541 Appendix A, index 1..61 (index 0 unused).
var staticTable = [...]struct{ name, value string }{
	{}, {":authority", ""}, {":method", "GET"}, {":method", "POST"}, {":path", "/"},
	{":path", "/index.html"}, {":scheme", "http"}, {":scheme", "https"}, {":status", "200"},
	{":status", "204"}, {":status", "206"}, {":status", "304"}, {":status", "400"}, {":status", "404"},
	{":status", "500"}, {"accept-charset", ""}, {"accept-encoding", "gzip, deflate"},
	{"accept-language", ""}, {"accept-ranges", ""}, {"accept", ""}, {"access-control-allow-origin", ""},
	{"age", ""}, {"allow", ""}, {"authorization", ""}, {"cache-control", ""}, {"content-disposition", ""},
	{"content-encoding", ""}, {"content-language", ""}, {"content-length", ""}, {"content-location", ""},
	{"content-range", ""}, {"content-type", ""}, {"cookie", ""}, {"date", ""}, {"etag", ""}, {"expect", ""},
	{"expires", ""}, {"from", ""}, {"host", ""}, {"if-match", ""}, {"if-modified-since", ""},
	{"if-none-match", ""}, {"if-range", ""}, {"if-unmodified-since", ""}, {"last-modified", ""}, {"link", ""},
	{"location", ""}, {"max-forwards", ""}, {"proxy-authenticate", ""}, {"proxy-authorization", ""},
	{"range", ""}, {"referer", ""}, {"refresh", ""}, {"retry-after", ""}, {"server", ""}, {"set-cookie", ""},
	{"strict-transport-security", ""}, {"transfer-encoding", ""}, {"user-agent", ""}, {"vary", ""},
	{"via", ""}, {"www-authenticate", ""},
}

// staticNames maps a static-table name to its first index.
var staticNames = func() map[string]int {
	m := make(map[string]int, len(staticTable))
	for i := len(staticTable) - 1; i >= 1; i-- {
		m[staticTable[i].name] = i
	}
	return m
}()
