package peer

import (
	"errors"
	"net"
	"time"

	"go.uber.org/zap"
)

// tcpConn is what the echo providers serve: an accepted *net.TCPConn, or one whose first bytes a
// UnifiedEcho has read to pick its provider (replayConn gives them back). SetLinger(0) is how a kill
// resets it.
type tcpConn interface {
	net.Conn
	SetLinger(sec int) error
}

var (
	_ tcpConn = (*net.TCPConn)(nil)
	_ tcpConn = (*replayConn)(nil)
)

// acceptEach hands every connection accepted on ln to serve, until ln is closed. A failing Accept
// (out of descriptors, say) is retried after a backoff from 5 ms doubling up to 1 s, as net/http's
// Serve does; closing ln ends the wait too. what names the server in the log.
func acceptEach(ln net.Listener, log *zap.Logger, what string, serve func(*net.TCPConn)) {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			log.Warn(what+": accept failed; retrying", zap.Error(err), zap.Duration("backoff", backoff))
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		serve(nc.(*net.TCPConn))
	}
}

// replayConn is a connection whose first bytes were read to sniff its protocol: Read returns them
// first, then reads the socket. Only the connection's one reader calls Read.
type replayConn struct {
	*net.TCPConn
	head []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.head) == 0 {
		return c.TCPConn.Read(b)
	}
	n := copy(b, c.head)
	c.head = c.head[n:]
	return n, nil
}
