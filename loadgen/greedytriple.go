package loadgen

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/h2"
)

// Greedy Triple consumers (GreedyConfig.Protocol "triple"): h2c with prior knowledge, like Run's
// Triple consumers, but each stream is a small call (a checked body of greedyCallBytes) that asks the
// provider for a Size-byte answer (peer.TripleAnswerSizeHeader): an HTTP/2 client that never reads
// cannot send more than its first flow-control windows, so what it makes its proxy hold is answers.
// Both kinds announce large receive windows (1 MiB a stream, 16 MiB the connection, like a gRPC
// client's BDP estimate after a while), so that a target pushes answers at them as fast as TCP takes.
//
//	| Read  | after the server's first SETTINGS
//	|-------|-------------------------------------------------------------------------------------------
//	| false | opens as many streams as the server allows (at most greedyStreams), writes their calls, and
//	|       | never reads again; a PING every greedyPingEvery shows when the target closed it
//	| true  | keeps that many streams open: reads every answer, checks it is its own key's body of Size
//	|       | bytes, hands the windows back and opens the next stream (a bulk reader)

const (
	greedyCallBytes = 64 // a full checked body: the key the answer is built from
	greedyStreams   = 100
	greedyPingEvery = 250 * time.Millisecond
)

// greedyTriple runs one greedy Triple connection until ctx ends or the target closes it; it reports
// whether the target closed it first.
func greedyTriple(ctx context.Context, nc net.Conn, cfg GreedyConfig, base uint64, res *GreedyResult) (closed bool) {
	g := &greedyH2{nc: nc, cfg: cfg, base: base, res: res,
		conn: h2.NewConn(h2.Config{Role: h2.RoleClient, InitialWindowSize: h2StreamWindow, ConnWindowSize: h2ConnWindow}),
		head: []h2.HeaderField{
			{Name: ":method", Value: "POST"},
			{Name: ":scheme", Value: "http"},
			{Name: ":path", Value: "/" + DefaultService + "/" + DefaultMethod},
			{Name: ":authority", Value: cfg.Target},
			{Name: "content-type", Value: peer.TripleContentType},
			{Name: "te", Value: "trailers"},
			{Name: peer.TripleAnswerSizeHeader, Value: strconv.Itoa(cfg.Size)},
		},
		streams: map[uint32]uint64{},
		buf:     make([]byte, 64<<10),
	}
	if err := g.flush(); err != nil {
		return ctx.Err() == nil
	}
	for !g.ready { // the server's SETTINGS: its stream limit
		if err := g.read(); err != nil {
			return ctx.Err() == nil
		}
	}
	if err := g.open(); err != nil {
		return ctx.Err() == nil
	}
	if cfg.Read {
		for {
			if err := g.read(); err != nil {
				return ctx.Err() == nil
			}
			if err := g.open(); err != nil {
				return ctx.Err() == nil
			}
		}
	}
	t := time.NewTicker(greedyPingEvery)
	defer t.Stop()
	for n := uint32(1); ; n++ {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		g.conn.Ping(peer.LoadPing(n))
		if err := g.flush(); err != nil {
			return ctx.Err() == nil
		}
	}
}

// greedyH2 is one greedy Triple connection's state; only its goroutine touches it.
type greedyH2 struct {
	nc      net.Conn
	cfg     GreedyConfig
	base    uint64
	res     *GreedyResult
	conn    *h2.Conn
	head    []h2.HeaderField
	ready   bool
	next    uint64            // calls made: call k carries key base+k
	streams map[uint32]uint64 // open stream -> its key
	in      map[uint32][]byte // Read: each open stream's answer so far
	out     []byte
	buf     []byte
	w       int
}

// open starts calls while the server takes streams (at most greedyStreams open) and writes them.
func (g *greedyH2) open() error {
	for len(g.streams) < greedyStreams && g.conn.CanOpenStream() {
		sid, err := g.conn.OpenStream()
		if err != nil {
			return err
		}
		g.next++
		key := g.base + g.next
		g.streams[sid] = key
		g.sync()
		if g.out, err = g.conn.AppendHeaders(g.out, sid, g.head, false); err != nil {
			return err
		}
		msg := peer.AppendTripleBody(nil, key, greedyCallBytes)
		var n int
		if g.out, n, err = g.conn.AppendData(time.Now().UnixNano(), g.out, sid, msg, true); err != nil {
			return err
		}
		if n != len(msg) { // 64 bytes and a stream window of at least 1 KiB: cannot happen
			return errors.New("loadgen: greedy call larger than the server's window")
		}
		atomic.AddUint64(&g.res.Sent, 1)
		atomic.AddUint64(&g.res.Bytes, uint64(len(msg)))
	}
	return g.flush()
}

// read reads once from the socket and handles every whole frame.
func (g *greedyH2) read() error {
	n, err := g.nc.Read(g.buf[g.w:])
	g.w += n
	rd := 0
	for {
		m, ev, perr := g.conn.Read(time.Now().UnixNano(), g.buf[rd:g.w])
		if perr != nil {
			return perr
		}
		if m == 0 {
			break
		}
		rd += m
		g.event(ev)
	}
	g.w = copy(g.buf, g.buf[rd:g.w])
	if g.w == len(g.buf) { // frames are at most 16 KiB (this side's SETTINGS_MAX_FRAME_SIZE)
		return errors.New("loadgen: greedy read buffer full")
	}
	if ferr := g.flush(); err == nil {
		err = ferr
	}
	return err
}

func (g *greedyH2) event(ev h2.Event) {
	switch ev.Kind {
	case h2.EventSettings:
		g.ready = true
	case h2.EventData:
		_ = g.conn.Consumed(ev.Stream, len(ev.Data))
		if _, ok := g.streams[ev.Stream]; ok {
			if g.in == nil {
				g.in = map[uint32][]byte{}
			}
			g.in[ev.Stream] = append(g.in[ev.Stream], ev.Data...)
			if ev.EndStream { // no trailers: the call failed
				g.end(ev.Stream, false)
			}
		}
	case h2.EventHeaders:
		if ev.EndStream {
			code, _, ok := h2.GRPCStatus(ev.Fields)
			g.end(ev.Stream, ok && code == 0)
		}
	case h2.EventReset:
		g.end(ev.Stream, false)
	}
}

// end counts a stream's end: answered when it ended well with its own key's body of Size bytes.
func (g *greedyH2) end(sid uint32, ok bool) {
	key, open := g.streams[sid]
	if !open {
		return
	}
	if ok && bytes.Equal(g.in[sid], peer.AppendTripleBody(nil, key, g.cfg.Size)) {
		atomic.AddUint64(&g.res.Answered, 1)
	} else {
		atomic.AddUint64(&g.res.Errors, 1)
	}
	delete(g.streams, sid)
	delete(g.in, sid)
}

// sync moves the Conn's own frames (its preface, SETTINGS, acks, WINDOW_UPDATEs) to out.
func (g *greedyH2) sync() {
	if o := g.conn.Output(); len(o) > 0 {
		g.out = append(g.out, o...)
		g.conn.ClearOutput()
	}
}

// flush writes everything queued.
func (g *greedyH2) flush() error {
	g.sync()
	if len(g.out) == 0 {
		return nil
	}
	_, err := g.nc.Write(g.out)
	g.out = g.out[:0]
	return err
}
