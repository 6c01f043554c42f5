package proxy

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stormgate/stormgate/peer"
)

// TestFreezeThawUnderLoad: consumers keep calling with unique bodies while the data
// plane freezes for a handover and thaws again (what a failed exec does), three
// times. Every call gets exactly its own answer, no connection closes, and the
// snapshot holds every consumer and provider connection with their books. While
// frozen, a probe consumer's request lies unread in Stormgate's socket and is not
// answered; thawed, it is.
func TestFreezeThawUnderLoad(t *testing.T) {
	f := newFixture(t, peer.ProviderConfig{}, func(c *Config) { c.UpstreamConns = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const consumers = 40
	clients := make([]*peer.Client, consumers)
	for i := range clients {
		clients[i] = f.dial(ctx)
	}
	probe := f.dial(ctx) // calls only while the plane is frozen
	waitFor(t, 10*time.Second, "consumers", func() bool { return f.srv.Stats().DownstreamConns == consumers+1 })

	load := startCalls(t, ctx, clients, 300)
	for round := range 3 {
		before := load.calls.Load()
		waitFor(t, 10*time.Second, "calls before the freeze", func() bool { return load.calls.Load() >= before+consumers })
		before = load.calls.Load()
		fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
		sn, err := f.srv.Freeze(fctx)
		fcancel()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		frozenAt := load.calls.Load()
		if len(sn.Sessions) != consumers+1 || len(sn.Pools) != 1 || len(sn.Pools[0].Conns) != 2 {
			t.Fatalf("round %d: snapshot has %d sessions, %d pools", round, len(sn.Sessions), len(sn.Pools))
		}
		b, err := sn.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back Snapshot
		if err := back.UnmarshalBinary(b); err != nil || len(back.FDs()) != consumers+3 {
			t.Fatalf("round %d: snapshot round trip: %v, %d fds", round, err, len(back.FDs()))
		}
		// Frozen: the probe's request reaches Stormgate's socket and stays there unread,
		// so unanswered; the load completes at most the answers already on their way.
		fd := sessionFD(t, sn, probe)
		body := fmt.Sprintf("probe-%d", round)
		answer := callAsync(ctx, probe, int64(round+1), body)
		waitFor(t, 10*time.Second, "the probe's request in Stormgate's socket", func() bool { return inq(fd) > 0 })
		select {
		case r := <-answer:
			t.Fatalf("round %d: the probe was answered while frozen: %+v %v", round, r.resp, r.err)
		default:
		}
		if n := inq(fd); n <= 0 {
			t.Fatalf("round %d: a frozen plane read the probe's request (%d bytes left)", round, n)
		}
		if n := load.calls.Load() - frozenAt; n > consumers {
			t.Errorf("round %d: %d calls completed while frozen", round, n)
		}
		f.srv.Thaw()
		if r := <-answer; r.err != nil || r.resp.Status != 20 || r.resp.Value != body {
			t.Fatalf("round %d: the probe after thaw: %+v %v", round, r.resp, r.err)
		}
		waitFor(t, 10*time.Second, "calls after thaw", func() bool { return load.calls.Load() > before+2*consumers })
	}
	load.finish(t, clients)
	t.Logf("%d calls, 3 freeze/thaw rounds", load.calls.Load())
}

// callLoad keeps every client calling echo with a unique body (padded with up to
// pad*6 bytes) until finish, checking each answer byte for byte.
type callLoad struct {
	calls, bad, longest atomic.Int64
	stop                chan struct{}
	wg                  sync.WaitGroup
}

func startCalls(t *testing.T, ctx context.Context, clients []*peer.Client, pad int) *callLoad {
	l := &callLoad{stop: make(chan struct{})}
	for i, c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for j := int64(1); ; j++ {
				select {
				case <-l.stop:
					return
				default:
				}
				want := fmt.Sprintf("c%d-%d-%s", i, j, bytes.Repeat([]byte{'x'}, int(j%7)*pad))
				began := time.Now()
				resp, err := c.Call(ctx, j, svc, "echo", want)
				if d := time.Since(began); int64(d) > l.longest.Load() {
					l.longest.Store(int64(d))
				}
				l.calls.Add(1)
				if err != nil || resp.Status != 20 || resp.Value != want {
					if l.bad.Add(1) <= 3 {
						t.Errorf("consumer %d call %d: err %v status %d own body %v", i, j, err, resp.Status, resp.Value == want)
					}
					return
				}
			}
		}()
	}
	return l
}

// finish stops the calls and checks that no client was closed, none got an answer
// for an id it did not send, and every call got its own answer.
func (l *callLoad) finish(t *testing.T, clients []*peer.Client) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	for i, c := range clients {
		select {
		case <-c.Closed():
			t.Errorf("consumer %d closed: %v", i, c.Err())
		default:
		}
		if c.Stats().Unexpected != 0 {
			t.Errorf("consumer %d: answers for ids it did not send", i)
		}
	}
	if l.bad.Load() != 0 {
		t.Fatalf("%d bad calls of %d", l.bad.Load(), l.calls.Load())
	}
}

// sessionFD is Stormgate's fd for consumer c in a snapshot.
func sessionFD(t *testing.T, sn *Snapshot, c *peer.Client) int {
	t.Helper()
	for _, ss := range sn.Sessions {
		if ss.Remote == c.LocalAddr().String() {
			return ss.FD
		}
	}
	t.Fatalf("no session for %v in the snapshot", c.LocalAddr())
	return -1
}

// inq is the number of bytes waiting in fd's receive queue.
func inq(fd int) int {
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	if err != nil {
		return -1
	}
	return n
}
