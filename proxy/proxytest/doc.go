// Package proxytest is what tests of a protocol package (proxy/triple) and of proxy's external test
// package need to run a proxy.Server as proxy's own tests do: the shipped settings as a Config, a
// loopback listener that hands connections to the Server as admission does, and a poll. It is for
// tests only; nothing else imports it. proxy's internal tests cannot import it (it imports proxy), and
// keep their own copies: TestProxytestConfigIsTestConfig (package proxy) holds Config to theirs.
//
// Its functions are safe to call from parallel tests; what they start ends at the test's cleanup.
package proxytest
