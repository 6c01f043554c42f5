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

//go:build !windows
// +build !windows

package netpoll

import (
	"sync/atomic"
)

// ------------------------------------------ implement FDOperator ------------------------------------------

// onHup means close by poller.
func (c *connection) onHup(p Poll) error {
	if !c.closeBy(poller) {
		return nil
	}
	c.triggerRead(Exception(ErrEOF, "peer close"))
	c.triggerWrite(Exception(ErrConnClosed, "peer close"))

	// call Disconnect callback first
	c.onDisconnect()

	// It depends on closing by user if OnConnect and OnRequest is nil, otherwise it needs to be released actively.
	// It can be confirmed that the OnRequest goroutine has been exited before closeCallback executing,
	// and it is safe to close the buffer at this time.
	onConnect := c.onConnectCallback.Load()
	onRequest := c.onRequestCallback.Load()
	needCloseByUser := onConnect == nil && onRequest == nil
	if !needCloseByUser {
		// already PollDetach when call OnHup
		c.closeCallback(true, false)
	}
	return nil
}

// onClose means close by user.
func (c *connection) onClose() error {
	// user code close the connection
	if c.closeBy(user) {
		c.triggerRead(Exception(ErrConnClosed, "self close"))
		c.triggerWrite(Exception(ErrConnClosed, "self close"))
		// Detach from poller when processing finished, otherwise it will cause race
		c.closeCallback(true, true)
		return nil
	}

	// closed by poller
	// still need to change closing status to `user` since OnProcess should not be processed again
	c.force(closing, user)

	// user code should actively close the connection to recycle resources.
	// poller already detached operator
	return c.closeCallback(true, false)
}

// closeBuffer recycle input & output LinkBuffer.
func (c *connection) closeBuffer() {
	onConnect, _ := c.onConnectCallback.Load().(OnConnect)
	onRequest, _ := c.onRequestCallback.Load().(OnRequest)
	// if client close the connection, we cannot ensure that the poller is not process the buffer,
	// so we need to check the buffer length, and if it's an "unclean" close operation, let's give up to reuse the buffer
	if c.inputBuffer.Len() == 0 || onConnect != nil || onRequest != nil {
		c.inputBuffer.Close()
	}
	if c.outputBuffer.Len() == 0 || onConnect != nil || onRequest != nil {
		c.outputBuffer.Close()
	}
}

// inputs implements FDOperator.
func (c *connection) inputs(vs [][]byte) (rs [][]byte) {
	// A new buffer node is sized by the read size too, not only by what the handler left unread
	// between releases: a handler that consumes everything it is given would otherwise keep every
	// read at the first node's size, whatever bookSize has grown to.
	nodeSize := c.maxSize
	if nodeSize < c.bookSize {
		nodeSize = c.bookSize
	}
	vs[0] = c.inputBuffer.book(c.bookSize, nodeSize)
	c.booked = len(vs[0])
	return vs[:1]
}

// inputAck implements FDOperator.
func (c *connection) inputAck(n int) (err error) {
	return c.inputRead(n, nil, n < c.booked, false)
}

// inputSpill implements FDOperator: the poller extended the read into its scratch buffer.
func (c *connection) inputSpill(n int, spill []byte, short bool) (err error) {
	return c.inputRead(n, spill, short, true)
}

// inputRead acknowledges a read of n bytes into what inputs booked and, when the poller extended
// the read into its scratch buffer (extended), spill, which is copied into the input buffer (the
// nodes a second read would have used) before the handler is triggered. short reports that the
// read came back shorter than offered (the socket is drained).
func (c *connection) inputRead(n int, spill []byte, short, extended bool) (err error) {
	if n <= 0 {
		c.inputBuffer.bookAck(0)
		return nil
	}

	// Auto size bookSize, up to maxReadSize: it doubles after a read that filled what bookSize
	// booked, or (extended) what was booked and the scratch (the socket may hold more).
	if !short && (c.booked == c.bookSize || extended) && c.bookSize < maxReadSize {
		c.bookSize <<= 1
		if c.bookSize > maxReadSize {
			c.bookSize = maxReadSize
		}
	}

	length, _ := c.inputBuffer.bookAck(n)
	read := n
	for rest := spill; len(rest) > 0; {
		nodeSize := c.maxSize
		if nodeSize < c.bookSize {
			nodeSize = c.bookSize
		}
		if nodeSize < len(rest) {
			nodeSize = len(rest)
		}
		p := c.inputBuffer.book(len(rest), nodeSize)
		m := copy(p, rest)
		length, _ = c.inputBuffer.bookAck(m)
		rest = rest[m:]
		read += m
	}
	// maxSize sizes new nodes for a handler that lets input pile up (one waiting for a large
	// message): it follows what the handler left unread, not this read, which bookSize sizes.
	if left := length - read; c.maxSize < left {
		c.maxSize = left
	}
	if c.maxSize > mallocMax {
		c.maxSize = mallocMax
	}

	needTrigger := true
	// first start onRequest; after a spill always try: a handler running elsewhere (netpoll's own
	// runner) may have consumed the first part and exited before the spill was acknowledged.
	if length == read || len(spill) > 0 {
		needTrigger = c.onRequest()
	}
	if needTrigger && length >= int(atomic.LoadInt64(&c.waitReadSize)) {
		c.triggerRead(nil)
	}
	if short && c.inputBuffer.IsEmpty() {
		// The read drained the socket and the handler consumed everything: the burst is over. The
		// read size goes back to what this read needed, and a node grown for the burst is not kept
		// by a connection gone quiet: the next read starts a node of the new size. (A handler that
		// lets input pile up, waiting for a large message, keeps its large reads.) When the poller
		// extends reads, the read size needs to hold only what the scratch would not, and no node
		// larger than the initial one is kept: the next read books a node of its size if it needs one.
		keep := 0
		if extended {
			n += len(spill) - spillSize
			keep = defaultLinkBufferSize
		}
		c.bookSize = readSizeFor(n)
		if !extended {
			keep = c.bookSize
		}
		if keep < LinkBufferCap {
			keep = LinkBufferCap
		}
		if c.inputBuffer.shrinkTail(keep) {
			c.releaseQuiet()
		}
	}
	return nil
}

// releaseQuiet frees the grown node shrinkTail left behind when no handler runs and the handler
// released it already (it read nothing since its last Release): otherwise the handler's next
// Release frees it, which for a connection gone quiet is at its next message. Only for connections
// read by OnRequest handlers: the processing lock keeps a handler, and the close callbacks that
// recycle the buffer, from running meanwhile.
func (c *connection) releaseQuiet() {
	if _, ok := c.onRequestCallback.Load().(OnRequest); !ok || !c.lock(processing) {
		return
	}
	c.inputBuffer.releaseIfReleased()
	if testHookReleaseQuiet != nil {
		testHookReleaseQuiet(c)
	}
	c.unlock(processing)
	// As at the end of a handler task: a close meanwhile found the lock taken and left its callbacks
	// to the holder. Not on this goroutine, though: the poller is in the middle of this fd's event and
	// holds its operator (do), and the callbacks free the operator, which waits until the poller lets go
	// of it (unused): run here they spun forever (netpoll's TestConnectionWrite, a Close from the test
	// racing a read's end, hung at 99 % CPU). A handler task that ends the same way runs on the runner.
	if closedBy := c.status(closing); closedBy != none && c.lock(processing) {
		go c.closeCallback(false, closedBy == user)
	}
}

// testHookReleaseQuiet, when set (by tests only), runs in releaseQuiet while it holds the processing
// lock: where a Close from another goroutine finds the lock taken and leaves its callbacks to the holder.
var testHookReleaseQuiet func(c *connection)

// readSizeFor is the read size after a short read of n bytes: the initial size doubled until it
// holds n, at most maxReadSize.
func readSizeFor(n int) int {
	size := defaultLinkBufferSize
	for size < n && size < maxReadSize {
		size <<= 1
	}
	if size > maxReadSize {
		size = maxReadSize
	}
	return size
}

// outputs implements FDOperator.
func (c *connection) outputs(vs [][]byte) (rs [][]byte, _ bool) {
	if c.outputBuffer.IsEmpty() {
		c.rw2r()
		return rs, false
	}
	rs = c.outputBuffer.GetBytes(vs)
	return rs, false
}

// outputAck implements FDOperator.
func (c *connection) outputAck(n int) (err error) {
	if n > 0 {
		c.outputBuffer.Skip(n)
		c.outputBuffer.Release()
	}
	if c.outputBuffer.IsEmpty() {
		c.rw2r()
	}
	return nil
}

// rw2r removed the monitoring of write events.
func (c *connection) rw2r() {
	c.operator.Control(PollRW2R)
	c.triggerWrite(nil)
}
