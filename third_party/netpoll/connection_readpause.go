// Copyright 2026 CloudWeGo Authors
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
	"errors"
	"runtime"
	"syscall"
)

// ReadPauser stops and restarts reading a connection: per-connection backpressure. While reading is
// paused the kernel's receive queue fills, then the peer's send queue, and the peer's writes block;
// other connections on the same poller are not affected. netpoll's connections implement it.
type ReadPauser interface {
	// PauseRead stops the poller from reading the socket: on Linux, EPOLLIN is dropped from the fd's
	// epoll interest, while hangups and errors are still reported and still close the connection as
	// before (bytes still in the kernel's receive queue are then lost, as with any close). Bytes
	// already read stay in the input buffer. The OnRequest loop ends after the handler call in
	// progress even if input remains unread (a handler may return with unread input without spinning),
	// and OnRequest is not called again until ResumeRead (nor does a reader blocked in Next for more
	// bytes than are buffered get them before then). Safe from any goroutine, including inside
	// OnRequest; idempotent; a no-op on a closed connection. On kqueue, hangups are not reported
	// while paused (they arrive through the read filter).
	PauseRead() error

	// ResumeRead monitors readability again and, when the input buffer holds unread bytes, runs the
	// OnRequest task as the poller would (through the configured Runner: with a runner that calls the
	// task inline it runs on the caller's goroutine, so the caller must hold no lock that OnRequest
	// takes). Safe from any goroutine, concurrently with the poller and with Close; idempotent; a no-op
	// on a closed connection.
	ResumeRead() error
}

var _ ReadPauser = &connection{}

// PauseRead implements ReadPauser.
func (c *connection) PauseRead() error {
	return c.controlRead(PollPauseRead)
}

// ResumeRead implements ReadPauser.
func (c *connection) ResumeRead() error {
	if err := c.controlRead(PollResumeRead); err != nil {
		return err
	}
	// The pause is cleared before the processing lock is tried: if a task holds the lock, it sees
	// the pause gone when it double-checks after unlocking, and goes on with the unread input.
	if !c.inputBuffer.IsEmpty() {
		c.onRequest()
	}
	return nil
}

// controlRead applies PollPauseRead or PollResumeRead while the connection holds its fd: closing
// stops the pausing key before it closes the fd and recycles the operator.
func (c *connection) controlRead(event PollEvent) error {
	for !c.lock(pausing) {
		if c.status(pausing) == 2 { // stopped: closed
			return nil
		}
		runtime.Gosched()
	}
	defer c.unlock(pausing)
	if !c.IsActive() {
		return nil
	}
	err := c.operator.Control(event)
	// Not registered yet (the ADD honours the pause) or already detached by a close in progress.
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EBADF) {
		return nil
	}
	return err
}
