package proxy

import (
	"testing"
)

// upstreamPending is the number of answers owed on every provider connection
// (requests and Stormgate's own heartbeats).
func (s *Server) upstreamPending() int {
	n := 0
	for _, p := range s.poolList() {
		for uc := range p.dubbo.conns() {
			n += int(uc.npending.Load())
		}
	}
	return n
}

// queuedRequests is the number of requests waiting in every connection's send queue.
func (s *Server) queuedRequests() int {
	n := 0
	for _, p := range s.poolList() {
		for uc := range p.dubbo.conns() {
			n += uc.queuedRequests()
		}
	}
	return n
}

// queuedID reports whether the request with consumer id id waits in a send queue.
func (s *Server) queuedID(id int64) bool {
	found := false
	for _, p := range s.poolList() {
		for uc := range p.dubbo.conns() {
			uc.mu.Lock()
			uc.sendq.each(func(e *queued) { found = found || e.id == id })
			uc.mu.Unlock()
		}
	}
	return found
}

// LiveDurationProbe is the live rule's entry for a Config duration field path
// (rearm_test.go): a probe of the waits it bounds, or why none runs; ok false when
// the table has no entry.
func LiveDurationProbe(field string) (probe func(*testing.T), noWait string, ok bool) {
	e, ok := liveDurations[field]
	return e.probe, e.noWait, ok
}

// SetTestProtocol passes HTTP/2 (triple.New) in for the tests of this package that serve it
// (testProtocol): TestMain's, in package proxy_test.
func SetTestProtocol(f func(Env) Protocol) { testProtocol = f }

// SetTestConfig passes the test settings (proxytest.Config) in for this package's tests (testConfig):
// TestMain's, in package proxy_test.
func SetTestConfig(f func(upstream string) Config) { shippedConfig = f }
