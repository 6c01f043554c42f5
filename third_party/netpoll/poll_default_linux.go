// Copyright 2022 CloudWeGo Authors
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//    http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package netpoll

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

func openPoll() (Poll, error) {
	return openDefaultPoll()
}

func openDefaultPoll() (*defaultPoll, error) {
	poll := new(defaultPoll)

	poll.buf = make([]byte, 8)
	p, err := EpollCreate(0)
	if err != nil {
		return nil, err
	}
	poll.fd = p

	r0, _, e0 := syscall.Syscall(syscall.SYS_EVENTFD2, 0, 0, 0)
	if e0 != 0 {
		_ = syscall.Close(poll.fd)
		return nil, e0
	}

	poll.Reset = poll.reset
	poll.Handler = poll.handler
	poll.wop = &FDOperator{FD: int(r0)}

	if err = poll.Control(poll.wop, PollReadable); err != nil {
		_ = syscall.Close(poll.wop.FD)
		_ = syscall.Close(poll.fd)
		return nil, err
	}

	poll.opcache = newOperatorCache()
	return poll, nil
}

type defaultPoll struct {
	pollArgs
	fd      int            // epoll fd
	wop     *FDOperator    // eventfd, wake epoll_wait
	buf     []byte         // read wfd trigger msg
	trigger uint32         // trigger flag
	m       sync.Map       //nolint:unused // only used in go:race
	opcache *operatorCache // operator cache
	more    bool           // the last batch may have left level-triggered readiness behind
	busy    bool           // the last batch skipped an operator someone else held
	// An EPOLL_CTL_MOD that makes a fd ready while it is still on epoll's ready list (as a
	// level-triggered fd stays after it was reported) wakes no one: the parked poller must look
	// again. modded records a MOD since the poller last looked; idle that it is parking.
	modded uint32
	idle   uint32
	// spill extends a connection's read past what it booked (FDOperator.InputSpill), so that a
	// message larger than the read size or than what is left of the buffer node is read in one
	// readv. Owned by the poller's goroutine; what lands in it is copied out before the next read.
	spill []byte
	// fns for handle events
	Reset   func(size, caps int)
	Handler func(events []epollevent) (closed bool)
}

type pollArgs struct {
	size     int
	caps     int
	events   []epollevent
	barriers []barrier
	hups     []func(p Poll) error
}

func (a *pollArgs) reset(size, caps int) {
	a.size, a.caps = size, caps
	a.events, a.barriers = make([]epollevent, size), make([]barrier, size)
	for i := range a.barriers {
		a.barriers[i].bs = make([][]byte, a.caps)
		a.barriers[i].ivs = make([]syscall.Iovec, a.caps)
	}
}

// Wait implements Poll.
//
// The poller parks on Go's runtime poller: the epoll fd, non-blocking, is itself watched by the
// runtime (it is readable while events are ready), and the loop runs inside one RawConn.Read. A
// poller with nothing to do is then a parked goroutine, not a thread blocked in epoll_wait(-1)
// holding a P, which sysmon has to retake and which keeps sysmon polling. After a batch that left
// nothing level-triggered behind (every read came back short, no accept, the batch not full) it
// parks at once, without a second epoll_wait: anything new on the fds wakes the runtime poller.
func (p *defaultPoll) Wait() (err error) {
	// The runtime watches a duplicate, so that the poller keeps its own fd whatever the runtime does.
	if fd, derr := syscall.Dup(p.fd); derr == nil {
		_ = syscall.SetNonblock(fd, true) // for os.NewFile to make it pollable
		f := os.NewFile(uintptr(fd), "netpoll-epoll")
		rc, rerr := f.SyscallConn()
		if rerr == nil {
			var closed bool
			closed, err = p.waitParked(rc)
			_ = f.Close()
			if closed {
				return err
			}
		} else {
			_ = f.Close()
		}
	}
	// The runtime cannot watch it: block in epoll_wait as netpoll always did.
	return p.waitBlocking()
}

// waitParked runs the loop inside one rc.Read, so that the runtime keeps the readiness of the
// epoll fd between batches (a new RawConn.Read would reset it and need an epoll_wait to recheck).
// closed reports that the poller was closed; otherwise the runtime could not poll the fd.
func (p *defaultPoll) waitParked(rc syscall.RawConn) (closed bool, err error) {
	p.Reset(128, barriercap)
	n := 0
	rerr := rc.Read(func(uintptr) bool {
		for {
			if n == p.size && p.size < 128*1024 {
				p.Reset(p.size<<1, barriercap)
			}
			atomic.StoreUint32(&p.idle, 0)
			atomic.StoreUint32(&p.modded, 0)
			n, err = EpollWait(p.fd, p.events, 0)
			if err != nil && err != syscall.EINTR {
				closed = true
				return true
			}
			if n > 0 {
				p.more = n == p.size
				if p.Handler(p.events[:n]) {
					closed = true
					return true
				}
				p.opcache.free()
				if p.busy {
					p.busy = false
					runtime.Gosched() // let the holder finish before looking again
				}
				if p.more {
					continue
				}
			}
			// Park until the epoll fd is readable, unless a MOD came in meanwhile (Control
			// triggers the poller for a MOD that comes after idle is set).
			atomic.StoreUint32(&p.idle, 1)
			if atomic.LoadUint32(&p.modded) == 0 {
				return false
			}
		}
	})
	if closed {
		return true, err
	}
	return false, rerr
}

// waitBlocking is netpoll's original loop: epoll_wait(-1), then epoll_wait(0) until a batch is empty.
func (p *defaultPoll) waitBlocking() (err error) {
	// init
	caps, msec, n := barriercap, -1, 0
	p.Reset(128, caps)
	// wait
	for {
		if n == p.size && p.size < 128*1024 {
			p.Reset(p.size<<1, caps)
		}
		n, err = EpollWait(p.fd, p.events, msec)
		if err != nil && err != syscall.EINTR {
			return err
		}
		if n <= 0 {
			msec = -1
			runtime.Gosched()
			continue
		}
		msec = 0
		if p.Handler(p.events[:n]) {
			return nil
		}
		// we can make sure that there is no op remaining if Handler finished
		p.opcache.free()
	}
}

// spillSize is the poller's scratch for reads past what a connection booked: a few messages of
// the sizes an RPC proxy forwards, at no memory per connection.
const spillSize = 16 << 10

// spillFor returns the scratch a read into bs (booked bytes) may continue into: none for operators
// that cannot take it, none past maxReadSize (what one readable event may take into a connection).
func (p *defaultPoll) spillFor(op *FDOperator, bs [][]byte, booked int) []byte {
	if op.InputSpill == nil || len(bs) >= cap(bs) || booked >= maxReadSize {
		return nil
	}
	if p.spill == nil {
		p.spill = make([]byte, spillSize)
	}
	if room := maxReadSize - booked; room < len(p.spill) {
		return p.spill[:room]
	}
	return p.spill
}

func (p *defaultPoll) handler(events []epollevent) (closed bool) {
	var triggerRead, triggerWrite, triggerHup, triggerError bool
	var err error
	for i := range events {
		operator := p.getOperator(0, unsafe.Pointer(&events[i].data))
		if operator == nil {
			continue
		}
		if !operator.do() {
			// Someone else holds the operator (a Release on the user's goroutine): the event,
			// level-triggered, is reported again by the next epoll_wait, which a parked poller
			// would otherwise not make until new readiness wakes it.
			p.more, p.busy = true, true
			continue
		}

		var totalRead int
		evt := events[i].events
		// A read paused from another goroutine after epoll_wait returned stays paused.
		triggerRead = evt&syscall.EPOLLIN != 0 && !operator.isReadPaused()
		triggerWrite = evt&syscall.EPOLLOUT != 0
		triggerHup = evt&(syscall.EPOLLHUP|syscall.EPOLLRDHUP) != 0
		triggerError = evt&syscall.EPOLLERR != 0

		// trigger or exit gracefully
		if operator.FD == p.wop.FD {
			// must clean trigger first
			syscall.Read(p.wop.FD, p.buf)
			atomic.StoreUint32(&p.trigger, 0)
			// if closed & exit
			if p.buf[0] > 0 {
				syscall.Close(p.wop.FD)
				syscall.Close(p.fd)
				operator.done()
				return true
			}
			operator.done()
			continue
		}

		if triggerRead {
			if operator.OnRead != nil {
				// for non-connection
				operator.OnRead(p)
				p.more = true // e.g. a listener accepts one connection per event
			} else if operator.Inputs != nil {
				// for connection
				bs := operator.Inputs(p.barriers[i].bs)
				if len(bs) > 0 {
					booked := iovecsLen(bs) // ioread clears bs
					spill := p.spillFor(operator, bs, booked)
					if len(spill) > 0 {
						bs = append(bs, spill)
					}
					n, err := ioread(operator.FD, bs, p.barriers[i].ivs)
					if len(spill) > 0 {
						if n > booked {
							operator.InputSpill(booked, spill[:n-booked], n < booked+len(spill))
						} else {
							operator.InputSpill(n, nil, true)
						}
					} else {
						operator.InputAck(n)
					}
					totalRead += n
					if err != nil {
						p.appendHup(operator)
						continue
					}
					if n == booked+len(spill) { // a full read: the socket may hold more
						p.more = true
					}
				}
			} else {
				logger.Printf("NETPOLL: operator has critical problem! event=%d operator=%v", evt, operator)
			}
		}
		if triggerHup {
			if triggerRead && operator.Inputs != nil {
				// read all left data if peer send and close
				var leftRead int
				// read all left data if peer send and close
				if leftRead, err = readall(operator, p.barriers[i]); err != nil && !errors.Is(err, ErrEOF) {
					logger.Printf("NETPOLL: readall(fd=%d)=%d before close: %s", operator.FD, total, err.Error())
				}
				totalRead += leftRead
			}
			// only close connection if no further read bytes
			if totalRead == 0 {
				p.appendHup(operator)
				continue
			}
			p.more = true // the hangup is reported again, to close it once it reads nothing
		}
		if triggerError {
			// Under block-zerocopy, the kernel may give an error callback, which is not a real error, just an EAGAIN.
			// So here we need to check this error, if it is EAGAIN then do nothing, otherwise still mark as hup.
			if _, _, _, _, err := syscall.Recvmsg(operator.FD, nil, nil, syscall.MSG_ERRQUEUE); err != syscall.EAGAIN {
				p.appendHup(operator)
			} else {
				operator.done()
			}
			continue
		}
		if triggerWrite {
			if operator.OnWrite != nil {
				// for non-connection
				operator.OnWrite(p)
				p.more = true
			} else if operator.Outputs != nil {
				// for connection
				bs, _ := operator.Outputs(p.barriers[i].bs)
				if len(bs) > 0 {
					n, err := iosend(operator.FD, bs, p.barriers[i].ivs, false)
					operator.OutputAck(n)
					if err != nil {
						p.appendHup(operator)
						continue
					}
				}
			} else {
				logger.Printf("NETPOLL: operator has critical problem! event=%d operator=%v", evt, operator)
			}
		}
		operator.done()
	}
	// hup conns together to avoid blocking the poll.
	p.onhups()
	return false
}

// iovecsLen is the bytes booked in bs.
func iovecsLen(bs [][]byte) (n int) {
	for i := range bs {
		n += len(bs[i])
	}
	return n
}

// Close will write 10000000
func (p *defaultPoll) Close() error {
	_, err := syscall.Write(p.wop.FD, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	return err
}

// Trigger implements Poll.
func (p *defaultPoll) Trigger() error {
	if atomic.AddUint32(&p.trigger, 1) > 1 {
		return nil
	}
	// MAX(eventfd) = 0xfffffffffffffffe
	_, err := syscall.Write(p.wop.FD, []byte{0, 0, 0, 0, 0, 0, 0, 1})
	return err
}

// Control implements Poll.
func (p *defaultPoll) Control(operator *FDOperator, event PollEvent) error {
	// DON'T move `fd=operator.FD` behind inuse() call, we can only access operator before op.inuse() for avoid race
	// G1:              G2:
	// op.inuse()       op.unused()
	// op.FD  -- T1     op.FD = 0  -- T2
	// T1 and T2 may happen together
	fd := operator.FD
	var op int
	var evt epollevent
	p.setOperator(unsafe.Pointer(&evt.data), operator)
	switch event {
	case PollReadable: // server accept a new connection and wait read
		operator.inuse()
		op, evt.events = syscall.EPOLL_CTL_ADD, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLERR
		if operator.isReadPaused() { // paused before it was registered
			evt.events &^= syscall.EPOLLIN
		}
	case PollWritable: // client create a new connection and wait connect finished
		operator.inuse()
		op, evt.events = syscall.EPOLL_CTL_ADD, EPOLLET|syscall.EPOLLOUT|syscall.EPOLLRDHUP|syscall.EPOLLERR
	case PollDetach: // deregister
		p.delOperator(operator)
		op, evt.events = syscall.EPOLL_CTL_DEL, syscall.EPOLLIN|syscall.EPOLLOUT|syscall.EPOLLRDHUP|syscall.EPOLLERR
	case PollR2RW, PollRW2R, PollPauseRead, PollResumeRead: // change what a connection waits for
		// EPOLL_CTL_MOD replaces the whole mask: compute it from the operator's state under its lock,
		// so a flush (PollR2RW) racing a pause cannot re-arm reading, nor a pause drop writing.
		operator.mu.Lock()
		defer operator.mu.Unlock()
		switch event {
		case PollR2RW, PollRW2R:
			operator.writing = event == PollR2RW
		case PollPauseRead:
			atomic.StoreInt32(&operator.readPaused, 1)
		case PollResumeRead:
			atomic.StoreInt32(&operator.readPaused, 0)
		}
		op, evt.events = syscall.EPOLL_CTL_MOD, syscall.EPOLLRDHUP|syscall.EPOLLERR
		if !operator.isReadPaused() {
			evt.events |= syscall.EPOLLIN
		}
		if operator.writing {
			evt.events |= syscall.EPOLLOUT
		}
		err := EpollCtl(p.fd, op, fd, &evt)
		atomic.StoreUint32(&p.modded, 1)
		if atomic.LoadUint32(&p.idle) == 1 {
			_ = p.Trigger()
		}
		return err
	}
	return EpollCtl(p.fd, op, fd, &evt)
}
