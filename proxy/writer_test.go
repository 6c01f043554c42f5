package proxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// writerPair is a writer on one end of a socketpair and the raw peer end.
type writerPair struct {
	w       *Writer
	peer    *os.File
	wg      sync.WaitGroup
	now     atomic.Int64
	errs    chan error
	onStall func() // may be nil
	idles   atomic.Int32
}

// writerPair is its writer's owner.
func (wp *writerPair) WriteStalled() {
	if wp.onStall != nil {
		wp.onStall()
	}
}
func (wp *writerPair) WriteFailed(err error) { wp.errs <- err }

func (wp *writerPair) WriterIdle() { wp.idles.Add(1) }

func newWriterPair(t *testing.T, sndbuf int) *writerPair {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds { // both in Go's poller: the peer end gets read deadlines
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	if sndbuf > 0 {
		_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf)
	}
	wp := &writerPair{peer: os.NewFile(uintptr(fds[1]), "peer"), errs: make(chan error, 16)}
	wp.now.Store(1)
	wp.w = &Writer{fd: fds[0], owner: wp, env: &writerEnv{
		now:    wp.now.Load,
		spawn:  func(f func()) { wp.wg.Add(1); go func() { defer wp.wg.Done(); f() }() },
		budget: &Budget{},
	}}
	wp.w.env.budget.limit.Store(1 << 40)
	t.Cleanup(func() {
		wp.w.Close()
		wp.wg.Wait()
		unix.Close(fds[0])
		wp.peer.Close()
	})
	return wp
}

// readAll reads n bytes from the peer end.
func (wp *writerPair) readAll(t *testing.T, n int) []byte {
	t.Helper()
	buf := make([]byte, n)
	_ = wp.peer.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(wp.peer, buf); err != nil {
		t.Fatalf("peer read: %v", err)
	}
	return buf
}

// waitDrained waits until the writer has handed every byte to the kernel and
// released the writer role.
func (wp *writerPair) waitDrained(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		wp.w.mu.Lock()
		idle := !wp.w.writing && len(wp.w.q) == 0
		wp.w.mu.Unlock()
		if idle {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("writer never drained: %d bytes queued", wp.w.Queued())
		}
		time.Sleep(time.Millisecond)
	}
}

// testFrames returns frames of mixed sizes with distinct contents.
func testFrames(rng *rand.Rand, n, maxLen int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		f := make([]byte, 1+rng.IntN(maxLen))
		for j := range f {
			f[j] = byte(rng.Uint32())
		}
		out[i] = f
	}
	return out
}

// TestWriterShortWriteAtEveryByte: whatever byte the kernel stops at (a short
// write or EAGAIN at any position of the stream, on the direct path or on a queued
// batch, then another short write on the flusher), the peer receives exactly the
// frames sent, in order, each once, and send's offsets are the frames' positions.
func TestWriterShortWriteAtEveryByte(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	frames := testFrames(rng, 6, 40)
	var want []byte
	for _, f := range frames {
		want = append(want, f...)
	}
	for _, batched := range []bool{true, false} {
		limit := len(want) // batched: the first write(2) carries the whole stream
		if !batched {
			limit = len(frames[0]) // direct: it carries the first frame, the rest queues
		}
		for cut := 0; cut <= limit; cut++ {
			for _, eagain := range []bool{false, true} {
				name := fmt.Sprintf("batched=%v/cut%d/eagain=%v", batched, cut, eagain)
				t.Run(name, func(t *testing.T) { shortWriteCase(t, frames, want, batched, cut, eagain) })
			}
		}
	}
}

func shortWriteCase(t *testing.T, frames [][]byte, want []byte, batched bool, cut int, eagain bool) {
	wp := newWriterPair(t, 0)
	var first, flusherFirst atomic.Bool
	wp.w.env.sys = func(fd int, b []byte) (int, error) {
		switch {
		case fd == wp.w.fd && first.CompareAndSwap(false, true):
			// The first write(2) on the connection's fd stops at byte cut.
			n := 0
			if cut > 0 {
				n, _ = writeFD(fd, b[:min(cut, len(b))])
			}
			if n == len(b) {
				return n, nil
			}
			if eagain || n == 0 {
				return n, unix.EAGAIN
			}
			return n, nil // short, no error
		case fd != wp.w.fd && len(b) > 1 && flusherFirst.CompareAndSwap(false, true):
			// The flusher's first write is short too. (A fake EAGAIN here would wait for
			// a writability edge that an empty socket never produces.)
			return writeFD(fd, b[:len(b)/2])
		}
		return writeFD(fd, b)
	}
	if batched {
		wp.w.mu.Lock()
		wp.w.writing = true // another goroutine holds the role: every frame queues
		wp.w.mu.Unlock()
	}
	var off uint64
	for i, f := range frames {
		buf := append([]byte(nil), f...)
		got, ok, err := wp.w.Send(buf, 0)
		if !ok || err != nil {
			t.Fatalf("frame %d: ok=%v err=%v", i, ok, err)
		}
		if got != off {
			t.Fatalf("frame %d at offset %d, want %d", i, got, off)
		}
		off += uint64(len(f))
		clear(buf) // the caller may reuse its buffer at once
	}
	if batched {
		if err, _ := wp.w.run(); err != nil { // the role holder writes the batch
			t.Fatal(err)
		}
	}
	got := wp.readAll(t, len(want))
	if !bytes.Equal(got, want) {
		t.Fatalf("peer got a different stream:\n got % x\nwant % x", got, want)
	}
	wp.waitDrained(t)
	if q := wp.w.Queued(); q != 0 {
		t.Fatalf("queued %d after drain", q)
	}
	if u := wp.w.env.budget.InUse(); u != 0 {
		t.Fatalf("budget charged %d after drain", u)
	}
}

// frameOf builds a self-checking frame: length, sender, sequence, payload, crc.
func frameOf(sender, seq int, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(16+len(payload)))
	b = binary.BigEndian.AppendUint32(b, uint32(sender))
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	b = append(b, payload...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// TestWriterConcurrentSenders: many goroutines send unique self-checking frames
// through one writer whose socket is small and whose peer reads slowly at first,
// so that the direct path, write combining, stalls and the flusher all run. Every
// frame arrives intact and once, and each sender's frames arrive in its order.
func TestWriterConcurrentSenders(t *testing.T) {
	const senders, each = 32, 150
	wp := newWriterPair(t, 8<<10)
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			for i := range each {
				p := make([]byte, rng.IntN(4<<10))
				for j := range p {
					p[j] = byte(rng.Uint32())
				}
				if _, ok, err := wp.w.Send(frameOf(s, i, p), 0); !ok || err != nil {
					t.Errorf("sender %d frame %d: ok=%v err=%v", s, i, ok, err)
					return
				}
			}
		}()
	}
	next := make([]int, senders)
	got := 0
	rng := rand.New(rand.NewPCG(3, 4))
	_ = wp.peer.SetReadDeadline(time.Now().Add(60 * time.Second))
	for got < senders*each {
		if got < 500 && rng.IntN(4) == 0 {
			time.Sleep(time.Millisecond) // a slow reader at first: the writer stalls
		}
		var hdr [4]byte
		if _, err := io.ReadFull(wp.peer, hdr[:]); err != nil {
			t.Fatalf("after %d frames: %v", got, err)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n < 16 || n > 16+4<<10 {
			t.Fatalf("frame %d: bad length %d (a spliced stream)", got, n)
		}
		rest := make([]byte, n-4)
		if _, err := io.ReadFull(wp.peer, rest); err != nil {
			t.Fatal(err)
		}
		b := append(hdr[:], rest...)
		body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
		if crc32.ChecksumIEEE(body) != sum {
			t.Fatalf("frame %d: checksum mismatch (bytes of two frames mixed)", got)
		}
		s, seq := int(binary.BigEndian.Uint32(b[4:])), int(binary.BigEndian.Uint32(b[8:]))
		if s >= senders || seq != next[s] {
			t.Fatalf("frame %d: sender %d seq %d, want seq %d", got, s, seq, next[min(s, senders-1)])
		}
		next[s]++
		got++
	}
	wg.Wait()
	wp.waitDrained(t)
}

// TestWriterStallDeadline: stalledFor reports how long the kernel has taken no
// byte, on the writer's clock; progress restarts it; an unstalled writer reports 0.
func TestWriterStallDeadline(t *testing.T) {
	wp := newWriterPair(t, 4<<10)
	var stalls atomic.Int32
	wp.onStall = func() { stalls.Add(1) }
	if d := wp.w.StalledFor(wp.now.Load()); d != 0 {
		t.Fatalf("idle writer stalled for %d", d)
	}
	frame := bytes.Repeat([]byte{7}, 64<<10)
	for wp.w.StalledFor(wp.now.Load()) == 0 {
		if _, ok, err := wp.w.Send(frame, 0); !ok || err != nil {
			t.Fatalf("send: %v %v", ok, err)
		}
	}
	if stalls.Load() != 1 {
		t.Fatalf("onStall ran %d times", stalls.Load())
	}
	wp.now.Add(int64(5 * time.Second))
	if d := time.Duration(wp.w.StalledFor(wp.now.Load())); d < 5*time.Second {
		t.Fatalf("stalled for %v after 5s without progress", d)
	}
	// The peer reads some: progress restarts the clock.
	buf := make([]byte, 32<<10)
	if _, err := wp.peer.Read(buf); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Duration(wp.w.StalledFor(wp.now.Load())) >= 5*time.Second {
		if time.Now().After(deadline) {
			t.Fatal("progress did not restart the stall clock")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriterCloseSplitsSentFromUnsent: after close, every frame ending at or
// before the final offset reached the peer whole, and every other frame is still
// readable whole through copyFrame and never reaches the peer.
func TestWriterCloseSplitsSentFromUnsent(t *testing.T) {
	for _, sndbuf := range []int{4 << 10, 16 << 10} {
		t.Run(fmt.Sprint(sndbuf), func(t *testing.T) {
			wp := newWriterPair(t, sndbuf)
			rng := rand.New(rand.NewPCG(uint64(sndbuf), 9))
			frames := testFrames(rng, 200, 2<<10)
			offs := make([]uint64, len(frames))
			for i, f := range frames {
				off, ok, err := wp.w.Send(f, 0)
				if !ok || err != nil {
					t.Fatalf("send %d: %v %v", i, ok, err)
				}
				offs[i] = off
			}
			final := wp.w.Close()
			wp.wg.Wait()
			var sent []byte
			for i, f := range frames {
				end := offs[i] + uint64(len(f))
				if end <= final {
					sent = append(sent, f...)
					continue
				}
				got, ok := wp.w.copyFrame(nil, offs[i], len(f))
				if !ok || !bytes.Equal(got, f) {
					t.Fatalf("frame %d (offset %d, final %d): copyFrame ok=%v, bytes equal=%v", i, offs[i], final, ok, bytes.Equal(got, f))
				}
			}
			// The peer has exactly the bytes up to final: the whole frames before it and
			// possibly a prefix of the frame that straddles it.
			got := wp.readAll(t, int(final))
			if !bytes.Equal(got[:len(sent)], sent) {
				t.Fatal("the peer's bytes are not the frames sent before the final offset")
			}
			_ = wp.peer.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if n, _ := wp.peer.Read(make([]byte, 1)); n != 0 {
				t.Fatal("bytes reached the peer after close")
			}
			if _, ok, err := wp.w.Send([]byte("late"), 0); ok || !errors.Is(err, errWriterClosed) {
				t.Fatalf("send after close: ok=%v err=%v", ok, err)
			}
			if u := wp.w.env.budget.InUse(); u != 0 {
				t.Fatalf("budget still charged %d after close", u)
			}
		})
	}
}

// TestWriterBounds: the per-writer queue bound and the process budget refuse a
// frame whole, and an empty writer always takes one frame.
func TestWriterBounds(t *testing.T) {
	wp := newWriterPair(t, 4<<10)
	wp.w.env.budget.limit.Store(256 << 10)
	big := bytes.Repeat([]byte{1}, 200<<10)
	if _, ok, err := wp.w.Send(big, 100<<10); !ok || err != nil {
		t.Fatalf("an empty writer must take one frame over the bound: %v %v", ok, err)
	}
	if _, ok, err := wp.w.Send(big, 100<<10); ok || !errors.Is(err, errQueueFull) {
		t.Fatalf("over the queue bound: ok=%v err=%v", ok, err)
	}
	if _, ok, err := wp.w.Send(big, 0); ok || !errors.Is(err, errOverBudget) {
		t.Fatalf("over the budget: ok=%v err=%v (charged %d)", ok, err, wp.w.env.budget.InUse())
	}
	small := []byte("fits")
	if _, ok, err := wp.w.Send(small, 0); !ok || err != nil {
		t.Fatalf("a frame within budget: %v %v", ok, err)
	}
	got := wp.readAll(t, len(big)+len(small))
	if !bytes.Equal(got[:len(big)], big) || !bytes.Equal(got[len(big):], small) {
		t.Fatal("stream differs")
	}
	wp.waitDrained(t)
	if u := wp.w.env.budget.InUse(); u != 0 {
		t.Fatalf("budget still charged %d after drain", u)
	}
}

// TestWriterSocketError: a write error on the flusher is reported to the owner.
func TestWriterSocketError(t *testing.T) {
	wp := newWriterPair(t, 4<<10)
	frame := bytes.Repeat([]byte{3}, 64<<10)
	for wp.w.StalledFor(wp.now.Load()) == 0 {
		wp.w.Send(frame, 0)
	}
	wp.peer.Close() // the flusher's next write fails with EPIPE or ECONNRESET
	select {
	case err := <-wp.errs:
		if err == nil {
			t.Fatal("nil error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the owner was not told of the socket error")
	}
}

// tryTake (an owner with its own queue, sendq.go) gets a frame in only while the
// writer takes it at once: claimed when idle, appended behind a write in progress
// up to the batch bound, refused while stalled or held; every refusal is answered by
// one "the role is free" signal, from writeClaimed (idle) or from the flusher
// (writerIdle), never both and never lost.
func TestWriterTryTakeAndIdle(t *testing.T) {
	t.Run("behind a write in progress", func(t *testing.T) {
		wp := newWriterPair(t, 0)
		inWrite, release := make(chan struct{}), make(chan struct{})
		first := true
		wp.w.env.sys = func(fd int, b []byte) (int, error) {
			if first {
				first = false
				close(inWrite)
				<-release
			}
			return unix.Write(fd, b)
		}
		a := bytes.Repeat([]byte{'a'}, 100)
		_, claimed, ok, _ := wp.w.tryTake(a, 64)
		if !claimed || !ok {
			t.Fatal("an idle writer did not give the role")
		}
		done := make(chan bool)
		go func() { _, idle := wp.w.writeClaimed(a); done <- idle }()
		<-inWrite
		b := bytes.Repeat([]byte{'b'}, 40)
		if _, claimed, ok, _ := wp.w.tryTake(b, 64); claimed || !ok {
			t.Fatal("a frame behind a write in progress was not appended")
		}
		if _, _, ok, _ := wp.w.tryTake(b, 64); ok {
			t.Fatal("a frame past the batch bound was taken")
		}
		close(release)
		if idle := <-done; !idle {
			t.Fatal("the role holder did not report the refused sender")
		}
		if got := wp.readAll(t, 140); !bytes.Equal(got, append(a, b...)) {
			t.Fatal("bytes out of order")
		}
		if n := wp.idles.Load(); n != 0 {
			t.Fatalf("writerIdle called %d times as well", n)
		}
	})
	t.Run("behind a stall", func(t *testing.T) {
		wp := newWriterPair(t, 4096)
		big := bytes.Repeat([]byte{'x'}, 1<<20)
		_, claimed, ok, _ := wp.w.tryTake(big, writeBatch)
		if !claimed || !ok {
			t.Fatal("an idle writer did not give the role")
		}
		if err, idle := wp.w.writeClaimed(big); err != nil || idle {
			t.Fatalf("writeClaimed: %v idle %v", err, idle)
		}
		small := []byte("small")
		if _, _, ok, _ := wp.w.tryTake(small, writeBatch); ok {
			t.Fatal("a stalled writer took a frame")
		}
		if wp.idles.Load() != 0 {
			t.Fatal("told idle while stalled")
		}
		wp.readAll(t, len(big))
		waitFor(t, 20*time.Second, "writerIdle after the stall", func() bool { return wp.idles.Load() == 1 })
		if !wp.w.Claimable() {
			t.Fatal("not claimable after the flusher finished")
		}
	})
	t.Run("held", func(t *testing.T) {
		wp := newWriterPair(t, 0)
		wp.w.hold()
		if _, _, ok, _ := wp.w.tryTake([]byte("x"), writeBatch); ok {
			t.Fatal("a held writer took a frame")
		}
		wp.w.resume(nil, 0)
		waitFor(t, 10*time.Second, "writerIdle after the resume", func() bool { return wp.idles.Load() == 1 })
	})
}

// TestWriterTakeCopy: takeCopy (an HTTP/2 provider connection: every batch is built in one
// scratch buffer, taken under the pool's lock and written after it) keeps its own copy of a
// batch that claims the role, so the caller may reuse its buffer at once; and a mustTake writer
// never refuses a frame while stalled, charging it to the budget by force instead.
func TestWriterTakeCopy(t *testing.T) {
	wp := newWriterPair(t, 4<<10)
	wp.w.mustTake = true
	wp.w.env.budget.limit.Store(64 << 10)
	scratch := []byte("first batch")
	want := bytes.Clone(scratch)
	off, claimed, ok, err := wp.w.TakeCopy(scratch)
	if off != 0 || !claimed || !ok || err != nil {
		t.Fatalf("takeCopy on an idle writer: off %d claimed %v ok %v err %v", off, claimed, ok, err)
	}
	copy(scratch, "XXXXXXXXXXX") // the caller reuses its buffer before the write
	if err, _ := wp.w.WriteTaken(); err != nil {
		t.Fatal(err)
	}
	if got := wp.readAll(t, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("the peer read %q, want %q", got, want)
	}
	// Fill the socket until the writer stalls, then go past the budget: every frame is taken.
	big := bytes.Repeat([]byte{7}, 32<<10)
	sent := 0
	for i := 0; i < 8; i++ {
		_, claimed, ok, err := wp.w.TakeCopy(big)
		if !ok || err != nil {
			t.Fatalf("frame %d refused: %v (charged %d of %d)", i, err, wp.w.env.budget.InUse(), 64<<10)
		}
		if claimed {
			wp.w.WriteTaken()
		}
		sent += len(big)
	}
	if wp.w.StalledFor(wp.now.Load()) == 0 || wp.w.env.budget.InUse() <= 64<<10 {
		t.Fatalf("stalled for %d, charged %d: want a stall charged past the budget", wp.w.StalledFor(wp.now.Load()), wp.w.env.budget.InUse())
	}
	if got := wp.readAll(t, sent); !bytes.Equal(got, bytes.Repeat([]byte{7}, sent)) {
		t.Fatal("stream differs")
	}
	wp.waitDrained(t)
	if u := wp.w.env.budget.InUse(); u != 0 {
		t.Fatalf("budget still charged %d after drain", u)
	}
}
