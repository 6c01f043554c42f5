package loadgen

import (
	"io"
	"net"
	"testing"

	"github.com/stormgate/stormgate/proxy/dubbo"
)

func TestPendingRing(t *testing.T) {
	var p pendingRing
	p.reset()
	var ids []int64
	for i := range 100 { // grows past the initial 8 slots with entries outstanding
		kind := slotRequest
		if i%10 == 0 {
			kind = slotHeartbeat
		}
		ids = append(ids, p.push(kind, int64(i)))
	}
	if ids[0] != 1 || ids[99] != 100 {
		t.Fatalf("ids %d..%d", ids[0], ids[99])
	}
	if _, o := p.complete(1, slotRequest); o != unknown {
		t.Fatalf("id 1 is a heartbeat; answering it as a request gave %v", o)
	}
	if s, o := p.complete(1, slotHeartbeat); o != matched || s.at != 0 {
		t.Fatalf("complete(1) = %v %v", s, o)
	}
	if _, o := p.complete(5, slotRequest); o != matched {
		t.Fatal(o)
	}
	if _, o := p.complete(5, slotRequest); o != duplicate {
		t.Fatalf("second reply: %v", o)
	}
	if _, o := p.complete(1000, slotRequest); o != unknown {
		t.Fatalf("never issued: %v", o)
	}
	// Expire everything sent at time <= 49: ids 2..50 minus answered 5, of which heartbeats 11,21,31,41.
	reqs, hbs := p.expire(49, 49)
	if reqs != 44 || hbs != 4 || p.head != 51 {
		t.Fatalf("expired %d reqs %d hbs, head %d", reqs, hbs, p.head)
	}
	if _, o := p.complete(3, slotRequest); o != late {
		t.Fatalf("expired id: %v", o)
	}
	reqs, hbs = p.dropAll()
	if reqs != 45 || hbs != 5 || p.head != p.next {
		t.Fatalf("dropped %d/%d", reqs, hbs)
	}
	p.reset() // a new connection continues the id sequence
	if id := p.push(slotRequest, 0); id != 101 {
		t.Fatalf("id after reset %d", id)
	}
}

// The request hot path — enqueue a request, write it (non-blocking write(2) on a real socket), match
// its reply, record latency — allocates nothing once the buffers have grown.
func TestHotPathAllocs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	drained := make(chan int64)
	go func() {
		s, err := ln.Accept()
		if err != nil {
			close(drained)
			return
		}
		n, _ := io.Copy(io.Discard, s)
		s.Close()
		drained <- n
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: Config{Timeout: DefaultTimeout}.withDefaults(), reqFrame: requestFrame("svc", "echo", "hello")}
	r.win.Store(&r.windows[0])
	c := &consumer{r: r, shard: newShard(), nc: nc, rc: rc}
	c.rawFn = c.rawWrite
	c.ring.reset()
	reply := append(appendHeader(nil, serialHess2, statusOK, 0, len(okBody)), okBody...)
	step := func() {
		c.sendRequest(r.now(), 0, 0, false)
		dubbo.SetID(reply, c.ring.next-1)
		h, err := dubbo.ParseHeader(reply, r.cfg.MaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		c.handle(h, reply[hdrLen:])
	}
	step()
	if n := testing.AllocsPerRun(1000, step); n != 0 {
		t.Fatalf("%v allocs per request", n)
	}
	nc.Close()
	if got, want := <-drained, int64(1002*len(r.reqFrame)); got != want || r.cnt.ok.Load() != 1002 {
		t.Fatalf("peer read %d bytes, want %d (1002 requests written inline); ok %d", got, want, r.cnt.ok.Load())
	}
	if c.queued || len(c.out) != 0 {
		t.Fatal("a request was left for the shard writer")
	}
}
