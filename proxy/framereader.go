package proxy

import (
	"errors"
	"github.com/stormgate/stormgate/proxy/wire"
	"sync/atomic"
)

// ByteSource is the part of netpoll.Reader the frame reader uses.
type ByteSource interface {
	Len() int
	Peek(n int) ([]byte, error)
	Next(n int) ([]byte, error)
	Skip(n int) error
}

// readResult is what one frameReader.next call found.
type readResult uint8

const (
	readMore    readResult = iota // no whole frame yet; everything available was consumed
	readFrame                     // one whole frame
	readSkipped                   // a frame's header was read; its body is being discarded (too large, or no budget)
	readBad                       // a malformed header: the stream cannot go on
)

// maxHeaderLen bounds Codec.HeaderLen for the reader's inline header buffer.
const maxHeaderLen = 32

// frameReader cuts frames out of a connection's input without ever waiting for
// bytes that have not arrived, so that a handler may run on a poller goroutine and
// one slow peer holds no goroutine. A frame that arrives whole is returned in place
// (a slice of netpoll's buffer, valid until its Release); a frame that arrives in
// pieces is copied into a buffer of its own as it arrives, growing with what has
// actually arrived (a header that announces 8 MiB and trickles costs what it sent),
// charged to the process budget. A frame that does not fit the budget, or (when the
// owner asks) one over the size limit, is skipped: its header is reported and its body
// discarded as it arrives, so the stream stays in step.
//
// One goroutine at a time calls next (netpoll runs one handler per connection at a
// time); partialSince may be read from any goroutine (the idle timer).
type frameReader struct {
	hdr     [maxHeaderLen]byte // a header that arrived in pieces
	hlen    int
	buf     []byte     // a frame being reassembled (header included); nil when none
	f       wire.Frame // buf's header
	charged int        // cap(buf) charged to the budget
	skip    int        // body bytes still to discard
	done    bool       // buf was returned by the last call; free it on the next
	since   atomic.Int64
}

// next returns the next frame, consuming input as it goes. maxFrame caps a frame's
// length; with skipOversize a larger frame is reported as readSkipped (err wraps
// ErrFrameTooLarge) instead of readBad.
func (fr *frameReader) next(r ByteSource, c wire.Codec, maxFrame int, skipOversize bool, b *Budget, now int64) (wire.Frame, []byte, readResult, error) {
	if fr.done {
		fr.free(b)
	}
	hl := c.HeaderLen()
	for {
		if fr.skip > 0 {
			n := min(fr.skip, r.Len())
			if n == 0 {
				return wire.Frame{}, nil, readMore, nil
			}
			_ = r.Skip(n)
			if fr.skip -= n; fr.skip == 0 {
				fr.since.Store(0)
			}
			continue
		}
		avail := r.Len()
		if avail == 0 {
			return wire.Frame{}, nil, readMore, nil
		}
		switch {
		case fr.buf != nil: // a body in pieces
			n := min(fr.f.Len-len(fr.buf), avail)
			if !fr.grow(len(fr.buf)+n, b) {
				f := fr.f
				fr.skip = f.Len - len(fr.buf)
				fr.free(b)
				return f, nil, readSkipped, errOverBudget
			}
			p, _ := r.Next(n)
			fr.buf = append(fr.buf, p...)
			if len(fr.buf) < fr.f.Len {
				return wire.Frame{}, nil, readMore, nil
			}
			fr.done = true
			fr.since.Store(0)
			return fr.f, fr.buf, readFrame, nil

		case fr.hlen > 0 || avail < hl: // a header in pieces
			if fr.hlen == 0 {
				fr.since.Store(now)
			}
			n := min(hl-fr.hlen, avail)
			p, _ := r.Next(n)
			fr.hlen += copy(fr.hdr[fr.hlen:hl], p)
			if fr.hlen < hl {
				// Not a frame at all (a telnet "ls\r\n"): report it now, not at frame_read_timeout.
				if f, err := c.ParseHeader(fr.hdr[:fr.hlen], maxFrame); errors.Is(err, wire.ErrBadMagic) {
					fr.hlen = 0
					fr.since.Store(0)
					return fr.badHeader(f, err, hl, skipOversize)
				}
				return wire.Frame{}, nil, readMore, nil
			}
			fr.hlen = 0
			f, err := c.ParseHeader(fr.hdr[:hl], maxFrame)
			if err != nil {
				fr.since.Store(0)
				return fr.badHeader(f, err, hl, skipOversize)
			}
			fr.f = f
			if !fr.grow(min(f.Len, hl+r.Len()), b) {
				fr.f = wire.Frame{}
				fr.skip = f.Len - hl
				return f, nil, readSkipped, errOverBudget
			}
			fr.buf = append(fr.buf, fr.hdr[:hl]...)
			if f.Len == hl {
				fr.done = true
				fr.since.Store(0)
				return f, fr.buf, readFrame, nil
			}

		default: // between frames, a whole header available
			hdr, _ := r.Peek(hl)
			f, err := c.ParseHeader(hdr, maxFrame)
			if err != nil {
				_ = r.Skip(hl)
				return fr.badHeader(f, err, hl, skipOversize)
			}
			if avail >= f.Len {
				frame, _ := r.Next(f.Len)
				return f, frame, readFrame, nil
			}
			fr.since.Store(now)
			fr.f = f
			if !fr.grow(avail, b) {
				fr.f = wire.Frame{}
				_ = r.Skip(avail)
				fr.skip = f.Len - avail
				return f, nil, readSkipped, errOverBudget
			}
			p, _ := r.Next(avail)
			fr.buf = append(fr.buf, p...)
			return wire.Frame{}, nil, readMore, nil
		}
	}
}

// badHeader reports a header that failed to parse; its hl bytes are already consumed.
func (fr *frameReader) badHeader(f wire.Frame, err error, hl int, skipOversize bool) (wire.Frame, []byte, readResult, error) {
	if skipOversize && errors.Is(err, wire.ErrFrameTooLarge) && f.Len > hl {
		fr.skip = f.Len - hl
		return f, nil, readSkipped, err
	}
	return f, nil, readBad, err
}

// grow makes room for n bytes in buf, charging the budget for new capacity. It
// grows geometrically but never past the frame's length, so a trickled frame
// holds about what has arrived.
func (fr *frameReader) grow(n int, b *Budget) bool {
	if n <= cap(fr.buf) {
		return true
	}
	c := max(n, 2*cap(fr.buf), 512)
	if fr.f.Len > 0 {
		c = min(c, fr.f.Len)
	}
	c = max(c, n)
	if !b.TryReserve(c - fr.charged) {
		return false
	}
	nb := make([]byte, len(fr.buf), c)
	copy(nb, fr.buf)
	fr.buf = nb
	fr.charged = c
	return true
}

// free drops the reassembly buffer and returns its charge.
func (fr *frameReader) free(b *Budget) {
	b.Release(fr.charged)
	fr.buf, fr.charged, fr.done, fr.f = nil, 0, false, wire.Frame{}
}

// reset forgets any partial frame (the connection closed).
func (fr *frameReader) reset(b *Budget) {
	fr.free(b)
	fr.hlen, fr.skip = 0, 0
	fr.since.Store(0)
}

// partial reports whether bytes of an unfinished frame are held or expected.
func (fr *frameReader) partial() bool { return fr.buf != nil || fr.hlen > 0 || fr.skip > 0 }

// partialSince is when the unfinished frame began (unix nanos), 0 when none.
func (fr *frameReader) partialSince() int64 { return fr.since.Load() }
