// Package proxytest is what tests of a protocol package (proxy/triple) and of proxy itself need to run
// a proxy.Server as the sidecar does: the shipped settings as a Config, a loopback listener that hands
// connections to the Server as admission does, and the child process of the handover tests
// (HandoverChild). What needs no type of proxy's is internal/testkit's, on which this builds. It is for
// tests only; nothing else imports it.
//
// proxy's internal tests cannot import it (it imports proxy): TestMain, in package proxy_test, passes
// Config in to them (proxy.SetTestConfig, export_test.go), so that there is one set of test settings.
//
// Its functions are safe to call from parallel tests; what they start ends at the test's cleanup.
package proxytest
