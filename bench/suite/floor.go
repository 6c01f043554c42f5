package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

// The floor programs (bench/floor/*.c, built by bench/run.sh with gcc): the least an epoll event
// loop can spend, run in the same run as HAProxy and Stormgate so that ratios to them are free of
// the machine's mood. npfloor and npfwd (bench/floor, Go) are the least a responder and a
// multiplexing forwarder on netpoll's connections can spend: the floors of Stormgate's design
// rather than of any design.
const (
	hbFloor  = "hbfloor"  // bare epoll heartbeat responder
	fwdFloor = "fwdfloor" // bare epoll multiplexing forwarder
	npFloor  = "npfloor"  // heartbeat responder on netpoll connections, set up as Stormgate's
	npFwd    = "npfwd"    // multiplexing forwarder on netpoll connections, set up as Stormgate's
)

func init() {
	targetTitle[hbFloor] = "bare epoll responder"
	targetTitle[fwdFloor] = "bare epoll forwarder"
	targetTitle[npFloor] = "netpoll responder"
	targetTitle[npFwd] = "netpoll forwarder"
	targetColor[npFloor] = "#17becf"
	targetColor[npFwd] = "#17becf"
	targetColor[hbFloor] = "#2ca02c"
	targetColor[fwdFloor] = "#2ca02c"
}

// floorUpstreamConns is the forwarder's upstream connection count: Stormgate's default.
const floorUpstreamConns = 4

var (
	floorReadyRe = regexp.MustCompile(`^READY (\d+)`)
	floorCountRe = regexp.MustCompile(`^ANSWERED (\d+)`)
)

// heartbeatsAnswered is how many consumer heartbeats px has answered so far: Stormgate's
// stormgate_heartbeats_answered_total{side="downstream"} (in front of a Triple provider, its
// stormgate_http2_pings_answered_total), or the count hbfloor prints on SIGUSR1.
func (px *proxy) heartbeatsAnswered(ctx context.Context) (float64, error) {
	switch px.kind {
	case stormgate:
		m, err := scrape(ctx, px.metrics)
		if err != nil {
			return 0, err
		}
		if px.proto == protoTriple {
			return m.sum("stormgate_http2_pings_answered_total"), nil
		}
		return m.sum("stormgate_heartbeats_answered_total", `side="downstream"`), nil
	case hbFloor, npFloor:
		for len(px.counts) > 0 {
			<-px.counts
		}
		if err := syscall.Kill(px.procs[0].PID, syscall.SIGUSR1); err != nil {
			return 0, err
		}
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case n := <-px.counts:
			return float64(n), nil
		case <-t.C:
			return 0, fmt.Errorf("%s printed no count within 5 s of SIGUSR1", px.kind)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("%s does not count heartbeats", px.kind)
}

// startFloor starts a floor program listening on px.addr (fwdfloor in front of up).
func (s *Suite) startFloor(ctx context.Context, px *proxy, up *provider, o proxyOpts) error {
	var argv []string
	switch px.kind {
	case hbFloor:
		argv = []string{s.bins.hbfloor, "--listen", px.addr}
	case npFloor:
		argv = []string{s.bins.npfloor, "--listen", px.addr}
	case fwdFloor, npFwd:
		if up == nil {
			return fmt.Errorf("%s needs a provider", px.kind)
		}
		bin := s.bins.fwdfloor
		if px.kind == npFwd {
			bin = s.bins.npfwd
		}
		argv = []string{bin, "--listen", px.addr, "--upstream", up.addr,
			"--upstream-conns", strconv.Itoa(floorUpstreamConns)}
	}
	px.counts = make(chan uint64, 16)
	p, err := s.start(ctx, procSpec{name: px.kind, netns: o.ns, argv: argv, readyRe: floorReadyRe, bound: o.bound,
		onLine: func(line string) {
			if m := floorCountRe.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseUint(m[1], 10, 64)
				select {
				case px.counts <- n:
				default:
				}
			}
		}})
	if err != nil {
		return err
	}
	px.procs = []*Proc{p}
	if _, err := p.Ready(ctx, 30*time.Second); err != nil {
		px.stop()
		return err
	}
	return nil
}

// probeHeartbeat is the heartbeat the answers of the responders are compared on: what the load
// tool sends (request | two-way | event | hessian2, body N), with a recognizable id.
func probeHeartbeat() []byte {
	return dubbo.AppendHeartbeatRequest(nil, 0x0102030405060708)
}

// heartbeatAnswer sends probeHeartbeat to addr, split across two writes so the header is
// reassembled, and returns the bytes of the answer (one frame).
func heartbeatAnswer(ctx context.Context, addr string) ([]byte, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	req := probeHeartbeat()
	if _, err := c.Write(req[:5]); err != nil {
		return nil, err
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := c.Write(req[5:]); err != nil {
		return nil, err
	}
	hdr := make([]byte, dubbo.HeaderLen)
	if _, err := io.ReadFull(c, hdr); err != nil {
		return nil, fmt.Errorf("reading the answer's header: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[12:16])
	if n > 1<<16 {
		return nil, fmt.Errorf("answer declares a %d-byte body", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return nil, fmt.Errorf("reading the answer's body: %w", err)
	}
	return append(hdr, body...), nil
}

func hexBytes(b []byte) string {
	s := hex.EncodeToString(b)
	out := make([]byte, 0, len(s)+len(s)/2)
	for i := 0; i < len(s); i += 2 {
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, s[i:i+2]...)
	}
	return string(out)
}
