package h2

// DefaultMaxContinuations is how many CONTINUATION frames may follow one HEADERS frame (nghttp2's default
// bound since the 2024 CONTINUATION flood reports). A peer that splits a bounded block into more frames than
// that has no honest reason to.
const DefaultMaxContinuations = 8

var (
	errBlockTooLarge     = connErr(ErrCodeEnhanceYourCalm, "header block larger than the bound")
	errTooManyContinuals = connErr(ErrCodeEnhanceYourCalm, "too many CONTINUATION frames in one header block")
	errContinuationWrong = connErr(ErrCodeProtocol, "CONTINUATION on another stream than its HEADERS")
)

// Assembler joins a HEADERS frame and its CONTINUATION frames into one header block (RFC 9113 §4.3, §6.10),
// bounded in bytes and in frames, so a CONTINUATION flood (the CVE-2024-27316 family) costs at most one
// bounded buffer and ends the connection as soon as it crosses either bound, before any decoding. The
// zero value is not usable: use NewAssembler.
type Assembler struct {
	maxBlock  int
	maxConts  int
	open      bool
	stream    uint32
	endStream bool
	conts     int
	buf       []byte
}

// NewAssembler bounds a block to maxBlock encoded bytes and maxContinuations CONTINUATION frames.
func NewAssembler(maxBlock, maxContinuations int) *Assembler {
	return &Assembler{maxBlock: maxBlock, maxConts: maxContinuations}
}

// Open reports whether a header block is being assembled (a HEADERS without END_HEADERS was seen): until it
// completes, the only frame the peer may send is a CONTINUATION on the same stream.
func (a *Assembler) Open() bool { return a.open }

// Stream is the stream of the block being assembled.
func (a *Assembler) Stream() uint32 { return a.stream }

// Add takes a checked HEADERS or CONTINUATION frame. When the block is complete it returns it (valid until
// the next call) with done = true and the HEADERS frame's END_STREAM flag. A single HEADERS frame with
// END_HEADERS is returned without copying. Errors are connection errors.
func (a *Assembler) Add(h FrameHeader, payload []byte) (block []byte, endStream, done bool, err error) {
	frag, err := HeaderBlockFragment(h, payload)
	if err != nil {
		return nil, false, false, err
	}
	switch h.Type {
	case FrameHeaders:
		if a.open {
			return nil, false, false, errUnexpectedFrame
		}
		if len(frag) > a.maxBlock {
			return nil, false, false, errBlockTooLarge
		}
		if h.Flags.Has(FlagEndHeaders) {
			return frag, h.Flags.Has(FlagEndStream), true, nil
		}
		a.open, a.stream, a.endStream, a.conts = true, h.StreamID, h.Flags.Has(FlagEndStream), 0
		a.buf = append(a.buf[:0], frag...)
		return nil, false, false, nil
	case FrameContinuation:
		if !a.open {
			return nil, false, false, errContinuationLone
		}
		if h.StreamID != a.stream {
			return nil, false, false, errContinuationWrong
		}
		a.conts++
		if a.conts > a.maxConts {
			return nil, false, false, errTooManyContinuals
		}
		if len(a.buf)+len(frag) > a.maxBlock {
			return nil, false, false, errBlockTooLarge
		}
		a.buf = append(a.buf, frag...)
		if !h.Flags.Has(FlagEndHeaders) {
			return nil, false, false, nil
		}
		a.open = false
		return a.buf, a.endStream, true, nil
	}
	return nil, false, false, errUnexpectedFrame
}
