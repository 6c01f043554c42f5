package loadgen

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stormgate/stormgate/peer"
	"github.com/stormgate/stormgate/proxy/dubbo"
)

// GreedyConfig describes greedy neighbours: consumers that push large two-way requests
// as fast as TCP lets them, beside a well-behaved load (Run), to measure what they cost
// the others (isolation, issue 23). Each connection keeps writing requests of Size body
// bytes (checked bodies, so an echo provider answers them) for Duration; with Read it
// reads and checks its answers (a bulk sender), without it it never reads a byte (a
// consumer that stopped reading, which the target may close).
//
// With Protocol "triple" the connections speak h2c and Size is the answer each call asks for, not
// its request (greedytriple.go): an HTTP/2 client that never reads cannot send more than its first
// windows, so what it makes a proxy hold is answers.
type GreedyConfig struct {
	Target   string        `json:"target"`
	Conns    int           `json:"conns"`
	Size     int           `json:"size"` // body bytes per request (Triple: per answer), 1..8 MiB (Triple: 16..8 MiB)
	Read     bool          `json:"read"`
	Duration time.Duration `json:"duration_ns"`
	KeyBase  uint64        `json:"key_base,omitempty"` // body keys start above it (distinct from Run's)
	Protocol string        `json:"protocol,omitempty"` // ProtocolDubbo ("" too) or ProtocolTriple
}

// GreedyResult is what the greedy connections did.
type GreedyResult struct {
	Sent     uint64 `json:"sent"`     // requests written whole
	Answered uint64 `json:"answered"` // with Read: answers with their own body
	Errors   uint64 `json:"errors"`   // with Read: other answers (an error status, a wrong body)
	Closed   int    `json:"closed"`   // connections the target closed before Duration
	Bytes    uint64 `json:"bytes"`    // request bytes written
}

func (r *GreedyResult) String() string {
	return fmt.Sprintf("sent %d (%d MiB), answered %d, errors %d, closed by the target %d",
		r.Sent, r.Bytes>>20, r.Answered, r.Errors, r.Closed)
}

// Greedy runs greedy neighbours until cfg.Duration passes or ctx ends.
func Greedy(ctx context.Context, cfg GreedyConfig) (*GreedyResult, error) {
	if cfg.Conns < 1 || cfg.Size < 1 || cfg.Size > DefaultMaxFrame || cfg.Duration <= 0 || cfg.Duration > MaxDuration {
		return nil, errors.New("loadgen: greedy needs conns >= 1, size 1..8 MiB and duration 0..30m")
	}
	triple := cfg.Protocol == ProtocolTriple
	switch {
	case cfg.Protocol != "" && cfg.Protocol != ProtocolDubbo && !triple:
		return nil, fmt.Errorf("loadgen: greedy protocol %q: want %s or %s", cfg.Protocol, ProtocolDubbo, ProtocolTriple)
	case triple && cfg.Size < peer.CheckedHeaderLen:
		return nil, fmt.Errorf("loadgen: greedy Triple answers are checked bodies: size %d, want at least %d", cfg.Size, peer.CheckedHeaderLen)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var res GreedyResult
	var closed atomic.Int32
	var wg sync.WaitGroup
	for i := range cfg.Conns {
		nc, err := (&net.Dialer{Timeout: DefaultConnectTimeout}).DialContext(ctx, "tcp", cfg.Target)
		if err != nil {
			return nil, fmt.Errorf("loadgen: greedy connection %d: %w", i, err)
		}
		stop := context.AfterFunc(ctx, func() { nc.Close() })
		wg.Go(func() {
			defer stop()
			defer nc.Close()
			base := cfg.KeyBase + uint64(i)<<32
			if triple {
				if greedyTriple(ctx, nc, cfg, base, &res) {
					closed.Add(1)
				}
				return
			}
			var rw sync.WaitGroup
			if cfg.Read {
				rw.Go(func() { greedyRead(nc, base, &res) })
			}
			frame := make([]byte, 0, dubbo.HeaderLen+cfg.Size)
			for k := uint64(1); ctx.Err() == nil; k++ {
				frame = appendBodyRequest(frame[:0], int64(k), true, base+k, cfg.Size)
				if _, err := nc.Write(frame); err != nil {
					if ctx.Err() == nil {
						closed.Add(1)
					}
					break
				}
				atomic.AddUint64(&res.Sent, 1)
				atomic.AddUint64(&res.Bytes, uint64(len(frame)))
			}
			nc.Close()
			rw.Wait()
		})
	}
	wg.Wait()
	res.Closed = int(closed.Load())
	return &res, nil
}

// greedyRead reads answers until the connection ends, checking each one's body
// against its id (request k carries key base+k).
func greedyRead(nc net.Conn, base uint64, res *GreedyResult) {
	br := bufio.NewReaderSize(nc, 64<<10)
	hdr := make([]byte, dubbo.HeaderLen)
	var body []byte
	for {
		if _, err := io.ReadFull(br, hdr); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[12:]))
		if n < 0 || n > DefaultMaxFrame {
			return
		}
		if cap(body) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(br, body); err != nil {
			return
		}
		id := int64(binary.BigEndian.Uint64(hdr[4:]))
		if key, full, err := peer.CheckBody(body); hdr[3] == dubbo.StatusOK && err == nil && full && key == base+uint64(id) {
			atomic.AddUint64(&res.Answered, 1)
		} else if hdr[2]&dubbo.FlagRequest == 0 {
			atomic.AddUint64(&res.Errors, 1)
		}
	}
}
