// Package childproc starts one of our binaries (or any program) as a child process for a
// harness (e2e, interop, bench/suite, admission/storm), keeps its output lines, waits for a line
// that says it is ready or where it listens, finds the lines a test must fail on (a data race, a
// panic), and stops it with a grace period. It is a module of its own that uses only the standard
// library, so that interop/ (a module pinned to dubbo-go's dependencies) can require it too.
//
// A Proc is owned by its starter; its methods may be called from any goroutine. Two reader
// goroutines and one reaper per Proc end when the process has exited and its pipes are drained
// (Done is closed then).
package childproc
