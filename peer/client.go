package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// Errors returned by Client methods.
var (
	// ErrIDInUse: a call with the same id is already waiting on this client.
	ErrIDInUse = errors.New("peer: request id already in flight on this client")
	// ErrShortFrame: a frame given to Roundtrip is shorter than a header.
	ErrShortFrame = errors.New("peer: frame shorter than a header")
)

// eventBuffer is how many unread event frames a Client keeps; more are dropped and counted.
const eventBuffer = 64

// Response is a response frame received by a Client.
type Response struct {
	ID     int64
	Status byte
	Flags  byte
	// Value is, for status 20, the string value (empty for null or non-string values)
	// or the exception's message; for any other status, the error message.
	Value string
	// Exception is the exception's class name when the body type is WITH_EXCEPTION.
	Exception string
	// Raw is the whole frame, header included (a copy owned by the caller).
	Raw []byte
}

// Frame is a request received by a Client from the server side: heartbeats,
// READONLY/WRITEABLE events, anything else the server sends as a request.
type Frame struct {
	Header dubbo.Header
	Raw    []byte // the whole frame, header included (a copy owned by the caller)
}

// Event returns 'R' for READONLY, 'W' for WRITEABLE, 0 for anything else.
func (f Frame) Event() byte {
	if f.Header.Flags&dubbo.FlagEvent == 0 || len(f.Raw) < dubbo.HeaderLen {
		return 0
	}
	return dubbo.EventBody(f.Raw[dubbo.HeaderLen:])
}

// Kind classifies the frame by its flags.
func (f Frame) Kind() dubbo.Kind { return f.Header.Kind() }

// ClientStats is a snapshot of a Client's counters.
type ClientStats struct {
	Sent               uint64 // frames written (requests, heartbeats, heartbeat replies, raw)
	Responses          uint64 // responses delivered to a waiting call
	Unexpected         uint64 // responses with no waiting call: duplicates, unknown or abandoned ids
	HeartbeatsAnswered uint64 // server heartbeats answered
	Events             uint64 // server requests received (heartbeats included)
	EventsDropped      uint64 // server requests not reported because Events() was full
}

// Client is a Dubbo 2 consumer over one TCP connection. Its methods are safe for
// concurrent use; calls with distinct ids may be in flight at once.
type Client struct {
	nc       net.Conn
	br       *bufio.Reader
	maxFrame int

	writers atomic.Int32 // goroutines waiting for or holding wmu; the last one flushes
	wmu     sync.Mutex
	bw      *bufio.Writer
	wbuf    []byte

	mu      sync.Mutex
	pending map[int64]chan Response

	events chan Frame
	closed chan struct{} // closed by the reader when it ends; err is set before
	err    error

	sent, responses, unexpected, heartbeats, eventsIn, eventsDropped atomic.Uint64
}

// Dial connects to addr. maxFrame caps frames read (<= 0 means dubbo.DefaultMaxFrame);
// a larger frame ends the connection.
func Dial(ctx context.Context, addr string, maxFrame int) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return NewClient(nc, maxFrame), nil
}

// NewClient runs a Client over an established connection, which it then owns.
func NewClient(nc net.Conn, maxFrame int) *Client {
	if maxFrame <= 0 {
		maxFrame = dubbo.DefaultMaxFrame
	}
	c := &Client{
		nc:       nc,
		br:       bufio.NewReaderSize(nc, readBufSize),
		bw:       bufio.NewWriterSize(nc, writeBufSize),
		maxFrame: maxFrame,
		pending:  make(map[int64]chan Response),
		events:   make(chan Frame, eventBuffer),
		closed:   make(chan struct{}),
	}
	go c.readLoop()
	return c
}

// LocalAddr returns the client's side of the connection.
func (c *Client) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// Call sends a two-way request invoking service.method(String arg) with the given id and
// waits for the response with that id, ctx's end, or the connection's end.
func (c *Client) Call(ctx context.Context, id int64, service, method, arg string) (Response, error) {
	return c.CallTimeout(ctx, id, service, method, arg, 0)
}

// CallTimeout is Call with the consumer's timeout sent in the request's `timeout`
// attachment, as Java and dubbo-go consumers send it (timeout <= 0: none). Waiting is
// still bounded by ctx alone.
func (c *Client) CallTimeout(ctx context.Context, id int64, service, method, arg string, timeout time.Duration) (Response, error) {
	ch, err := c.register(id)
	if err != nil {
		return Response{}, err
	}
	c.lock()
	c.wbuf = dubbo.AppendRequestTimeout(c.wbuf[:0], id, true, service, method, arg, timeout)
	err = c.writeLocked(c.wbuf)
	c.trimLocked()
	if uerr := c.unlock(); err == nil {
		err = uerr
	}
	if err != nil {
		c.unregister(id)
		return Response{}, err
	}
	return c.wait(ctx, id, ch)
}

// CallOneWay sends a one-way request; no response is expected.
func (c *Client) CallOneWay(id int64, service, method, arg string) error {
	c.lock()
	c.wbuf = dubbo.AppendRequest(c.wbuf[:0], id, false, service, method, arg)
	err := c.writeLocked(c.wbuf)
	c.trimLocked()
	if uerr := c.unlock(); err == nil {
		err = uerr
	}
	return err
}

// Heartbeat sends a heartbeat request (da bb e2 00 <id> 00 00 00 01 4e) and waits for its reply.
func (c *Client) Heartbeat(ctx context.Context, id int64) (Response, error) {
	var b [dubbo.HeaderLen + 1]byte
	return c.Roundtrip(ctx, dubbo.AppendHeartbeatRequest(b[:0], id))
}

// Roundtrip sends a prebuilt frame and waits for the response carrying the id in the
// frame's header bytes 4..11.
func (c *Client) Roundtrip(ctx context.Context, frame []byte) (Response, error) {
	if len(frame) < dubbo.HeaderLen {
		return Response{}, ErrShortFrame
	}
	id := int64(uint64(frame[4])<<56 | uint64(frame[5])<<48 | uint64(frame[6])<<40 | uint64(frame[7])<<32 |
		uint64(frame[8])<<24 | uint64(frame[9])<<16 | uint64(frame[10])<<8 | uint64(frame[11]))
	ch, err := c.register(id)
	if err != nil {
		return Response{}, err
	}
	if err := c.Send(frame); err != nil {
		c.unregister(id)
		return Response{}, err
	}
	return c.wait(ctx, id, ch)
}

// Send writes raw bytes (any bytes: bad-input tests) and flushes.
func (c *Client) Send(frame []byte) error {
	c.lock()
	err := c.writeLocked(frame)
	if uerr := c.unlock(); err == nil {
		err = uerr
	}
	return err
}

// Events returns the requests the server sent on this connection: heartbeats (already
// answered), READONLY/WRITEABLE events and anything else. When the channel holds 64
// unread frames, further ones are dropped and counted. It is never closed; use Closed.
func (c *Client) Events() <-chan Frame { return c.events }

// Closed is closed when the connection has ended; Err then tells why.
func (c *Client) Closed() <-chan struct{} { return c.closed }

// Err is nil while the connection is open. After it ends: io.EOF when the server closed
// cleanly, an error wrapping syscall.ECONNRESET on a reset, net.ErrClosed after Close,
// or the framing error that made the client give up.
func (c *Client) Err() error {
	select {
	case <-c.closed:
		return c.err
	default:
		return nil
	}
}

// Close closes the connection and waits for the reader to end. Calls in flight return
// an error.
func (c *Client) Close() error {
	err := c.nc.Close()
	<-c.closed
	if errors.Is(err, net.ErrClosed) {
		return nil // the connection had already ended
	}
	return err
}

// Stats returns a snapshot of the client's counters.
func (c *Client) Stats() ClientStats {
	return ClientStats{
		Sent:               c.sent.Load(),
		Responses:          c.responses.Load(),
		Unexpected:         c.unexpected.Load(),
		HeartbeatsAnswered: c.heartbeats.Load(),
		Events:             c.eventsIn.Load(),
		EventsDropped:      c.eventsDropped.Load(),
	}
}

// lock takes the write lock, announcing a writer first so that the holder before it
// leaves the flush to it.
func (c *Client) lock() {
	c.writers.Add(1)
	c.wmu.Lock()
}

// unlock flushes unless another writer is already waiting (that one, or the last of
// them, flushes: concurrent callers share one write system call), then releases the lock.
func (c *Client) unlock() error {
	var err error
	if c.writers.Add(-1) == 0 && c.bw.Buffered() > 0 {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	return err
}

func (c *Client) writeLocked(b []byte) error {
	if _, err := c.bw.Write(b); err != nil {
		return err
	}
	c.sent.Add(1)
	return nil
}

func (c *Client) trimLocked() {
	if cap(c.wbuf) > maxScratch {
		c.wbuf = nil
	}
}

func (c *Client) register(id int64) (chan Response, error) {
	ch := make(chan Response, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.pending[id]; dup {
		return nil, fmt.Errorf("%w: %d", ErrIDInUse, id)
	}
	c.pending[id] = ch
	return ch, nil
}

// unregister removes id and reports whether it was still waiting (false: the reader
// has taken it and its response is in, or about to be in, the channel).
func (c *Client) unregister(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; !ok {
		return false
	}
	delete(c.pending, id)
	return true
}

func (c *Client) wait(ctx context.Context, id int64, ch chan Response) (Response, error) {
	select {
	case r := <-ch:
		return r, nil
	case <-ctx.Done():
		if c.unregister(id) {
			return Response{}, ctx.Err()
		}
		return <-ch, nil
	case <-c.closed:
		if c.unregister(id) {
			return Response{}, fmt.Errorf("peer: connection ended before response %d: %w", id, c.err)
		}
		return <-ch, nil
	}
}

func (c *Client) readLoop() {
	err := c.read()
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.closed)
	_ = c.nc.Close()
}

func (c *Client) read() error {
	for {
		hdr, err := c.br.Peek(dubbo.HeaderLen)
		if err != nil {
			if len(hdr) > 0 && errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		h, err := dubbo.ParseHeader(hdr, c.maxFrame)
		if err != nil {
			return err
		}
		frame := make([]byte, h.FrameLen())
		if _, err := io.ReadFull(c.br, frame); err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		switch k := h.Kind(); k {
		case dubbo.KindResponse, dubbo.KindEventResponse:
			c.deliver(h, frame)
		default:
			if k == dubbo.KindEventTwoWay {
				var b [dubbo.HeaderLen + 1]byte
				c.heartbeats.Add(1) // before the reply can reach its peer, as the provider counts its heartbeats
				if err := c.Send(dubbo.AppendHeartbeatReply(b[:0], h.ID, h.Serial())); err != nil {
					c.heartbeats.Add(^uint64(0))
					return err
				}
			}
			c.eventsIn.Add(1)
			select {
			case c.events <- Frame{Header: h, Raw: frame}:
			default:
				c.eventsDropped.Add(1)
			}
		}
	}
}

func (c *Client) deliver(h dubbo.Header, frame []byte) {
	c.mu.Lock()
	ch, ok := c.pending[h.ID]
	delete(c.pending, h.ID)
	c.mu.Unlock()
	if !ok {
		c.unexpected.Add(1)
		return
	}
	r := Response{ID: h.ID, Status: h.Status, Flags: h.Flags, Raw: frame}
	body := frame[dubbo.HeaderLen:]
	switch {
	case h.Flags&dubbo.FlagEvent != 0:
		// Heartbeat reply: body is null.
	case h.Status == dubbo.StatusOK:
		r.Value, r.Exception = okBody(body) // on a decode error Value stays empty; Raw has the bytes
	default:
		r.Value, _, _ = dubbo.ReadHessianString(body)
	}
	c.responses.Add(1)
	ch <- r
}
