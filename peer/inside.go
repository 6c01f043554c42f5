package peer

import (
	"encoding/binary"
	"io"
	"sync/atomic"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Counting the requests inside the provider (ProviderConfig.Inside): a two-way request
// is inside from the moment its last byte is read from the socket until the last byte
// of its answer is written to the socket. What a SIGKILL loses is exactly these, plus
// what the kernel held unread; a benchmark reads the count the process left behind.

// frameCounter follows the frame boundaries of a byte stream fed to it in pieces and
// counts the frames that end in each piece and match its kind.
type frameCounter struct {
	hdr   [dubbo.HeaderLen]byte
	nhdr  int
	left  int64 // body bytes still to come of the current frame
	match func(flags byte) bool
	cur   bool // the current frame matches
}

func (fc *frameCounter) feed(b []byte) (ended int) {
	for len(b) > 0 {
		if fc.nhdr < dubbo.HeaderLen {
			n := copy(fc.hdr[fc.nhdr:], b)
			fc.nhdr += n
			b = b[n:]
			if fc.nhdr < dubbo.HeaderLen {
				return ended
			}
			fc.left = int64(int32(binary.BigEndian.Uint32(fc.hdr[12:16])))
			fc.cur = fc.match(fc.hdr[2])
			if fc.left < 0 {
				fc.left = 0 // a bad frame: the reader closes the connection anyway
			}
		}
		n := min(int64(len(b)), fc.left)
		fc.left -= n
		b = b[n:]
		if fc.left == 0 {
			if fc.cur {
				ended++
			}
			fc.nhdr = 0
		}
	}
	return ended
}

func twoWayRequest(flags byte) bool {
	return flags&(dubbo.FlagRequest|dubbo.FlagTwoWay|dubbo.FlagEvent) == dubbo.FlagRequest|dubbo.FlagTwoWay
}

func answer(flags byte) bool { return flags&(dubbo.FlagRequest|dubbo.FlagEvent) == 0 }

// insideCount adds sign to inside for every frame of its kind that ends in a piece.
type insideCount struct {
	fc     frameCounter
	inside *atomic.Int64
	sign   int64
}

func (ic *insideCount) count(b []byte) {
	if k := ic.fc.feed(b); k > 0 {
		ic.inside.Add(ic.sign * int64(k))
	}
}

// insideReader counts requests whose last byte it read.
type insideReader struct {
	r io.Reader
	insideCount
}

func (ir *insideReader) Read(b []byte) (int, error) {
	n, err := ir.r.Read(b)
	ir.count(b[:n])
	return n, err
}

// insideWriter uncounts answers whose last byte it wrote.
type insideWriter struct {
	w io.Writer
	insideCount
}

func (iw *insideWriter) Write(b []byte) (int, error) {
	n, err := iw.w.Write(b)
	iw.count(b[:n])
	return n, err
}
