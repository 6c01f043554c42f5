// Package testkit is what package proxy's own tests share with the tests of the packages that import
// proxy (proxy/triple, proxy's external tests): a poll, a loopback listener that hands raw fds to a
// server, a metric reader, a gRPC client that sends bytes as they are, the exec'd child of the
// handover tests, and the like. It imports no package of the proxy, so that proxy's internal tests,
// which cannot import proxy/proxytest (it imports proxy), can use it; what needs proxy's types is
// proxy/proxytest's, built on this.
//
// It is for tests only. Its functions are safe to call from parallel tests; what they start ends at
// the test's cleanup.
package testkit
