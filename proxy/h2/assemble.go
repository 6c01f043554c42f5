package h2

// DefaultMaxContinuations is how many CONTINUATION frames a header block may have beyond those its size
// pays for (see Assembler): nghttp2's bound since the 2024 CONTINUATION flood reports, which every header
// block fitting in 9 frames meets whatever its frames' sizes.
const DefaultMaxContinuations = 8

// continuationPaid is how many bytes of a header block pay for one CONTINUATION frame beyond
// maxContinuations: SETTINGS_MAX_FRAME_SIZE's initial and lowest allowed value (RFC 9113 §4.2), the frame
// size every receiver accepts. Not the frame size this side announced, which may be larger: peers split a
// block at the receiver's announced size or at this one (nghttp2 always does, whatever was announced); the
// HTTP/2 stacks Stormgate meets never split below it. The peer's own SETTINGS_MAX_FRAME_SIZE bounds only
// what this side sends.
const continuationPaid = DefaultMaxFrameSize

var (
	errBlockTooLarge     = connErr(ErrCodeEnhanceYourCalm, "header block larger than the bound")
	errTooManyContinuals = connErr(ErrCodeEnhanceYourCalm, "too many CONTINUATION frames in one header block")
	errContinuationWrong = connErr(ErrCodeProtocol, "CONTINUATION on another stream than its HEADERS")
)

// Assembler joins a HEADERS frame and its CONTINUATION frames into one header block (RFC 9113 §4.3, §6.10),
// bounded in bytes and in frames, so a CONTINUATION flood (the CVE-2024-27316 family) costs at most one
// bounded buffer and ends the connection as soon as it crosses either bound, before any decoding. The
// zero value is not usable: use NewAssembler.
//
// The frame bound follows the byte bound: a block may have maxContinuations CONTINUATION frames plus one
// for every 16,384 bytes (continuationPaid) it holds so far:
//
//	| the peer sends                                                   | outcome
//	|------------------------------------------------------------------|-----------------------------------
//	| a block within the byte bound, in frames of 16 KiB or more (the  | accepted, however many frames
//	| last may be shorter)                                             |
//	| a block within the byte bound, in at most maxContinuations+1     | accepted, whatever the frames'
//	| frames                                                           | sizes (nghttp2's rule)
//	| CONTINUATIONs carrying less than 16 KiB each, on and on (flood)  | GOAWAY once the frames not paid
//	|                                                                  | for pass maxContinuations
//	| more bytes than the byte bound, in any frames                    | GOAWAY at the frame crossing it
//
// A fixed count alone (nghttp2's 8) refuses an honest block above 9 × 16 KiB, which a byte bound raised
// toward 1 MiB (http2.max_header_list_size) allows, and ends a connection other calls share. Paid for,
// a flood costs at most maxContinuations frames plus one per 16 KiB buffered: no more frames than an
// honest peer sends for the same bytes, and never more bytes than the bound.
type Assembler struct {
	maxBlock  int
	maxConts  int
	open      bool
	stream    uint32
	endStream bool
	conts     int
	buf       []byte
}

// NewAssembler bounds a block to maxBlock encoded bytes, and to maxContinuations CONTINUATION frames beyond
// one for every 16,384 bytes of it (see Assembler).
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
		size := len(a.buf) + len(frag)
		if a.conts > a.maxConts+size/continuationPaid {
			return nil, false, false, errTooManyContinuals
		}
		if size > a.maxBlock {
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
