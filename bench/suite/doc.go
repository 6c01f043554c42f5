// Command suite is the driver behind `make bench` (bench/run.sh): it runs Stormgate's benchmark
// scenarios side by side against three targets — consumers connected directly to the provider,
// through HAProxy in TCP mode, and through Stormgate — in one run, and regenerates
// docs/benchmarks.md and the plots in docs/img from what it measured.
//
// It drives separate processes only: providers (`stormbench provider`, the real dubbo-go provider
// from the interop module, or the suite's own slow-accept baseline listener), proxies (`sidecar run`,
// `haproxy`), and the load tool (`stormbench load`, whose JSON result and progress lines it reads).
// It measures them from the outside: CPU from /proc/PID/stat (utime+stime), RSS from
// /proc/PID/status, Stormgate's Prometheus metrics, kernel TcpExt counters from /proc/PID/net/netstat.
// Accept storms run inside a network namespace the suite creates (net.core.somaxconn is set there,
// never on the host).
//
// Floors and profiles (issue 12): the quiet, heartbeat and forward scenarios also run the floor
// programs of bench/floor (a bare epoll heartbeat responder and a bare epoll multiplexing
// forwarder, in C) as targets, so Stormgate's CPU is compared with the least an event loop can
// spend in the same run; the heartbeat and forward scenarios also run bench/floor/npfloor and
// bench/floor/npfwd, a responder and a forwarder on netpoll's connections with no other code (the
// floors of Stormgate's design). The heartbeat scenario keeps every
// target and its load tool running and stops (SIGSTOP) the load tools of the targets not being
// measured, alternating windows. Every
// profiled window comes after the windows that make a figure, never inside one: `perf record` and
// `perf stat` (child processes, when perf works here) on the target's processes and Go's CPU
// profile from Stormgate's admin listener (fetched by one goroutine that the profile's finish waits
// for); they are parsed after the load has ended.
//
// The scenarios are one table (scenarios.go): a name for --scenarios, the run method whose result
// goes into Results, what it needs (HAProxy, the floor programs, the dubbo-go binaries) and, for
// fleet and restart, how --update-section rewrites its section alone. A scenario copies its
// settings into its result as it starts; the report reads them from Results.Options, and
// loadResults puts a result's copies back into Options for results.json files written before
// Options held them (settingsFromResults).
//
// The report: the doc's prose and tables are text/template files in templates/, embedded with
// go:embed and parsed once with the Go code's formatting functions (report_tmpl.go); the Go code
// gathers the figures, picks verdicts and notes, and draws the plots (svg.go). testdata/render
// holds a real run's results.json and the doc and plots it renders to, and a real soak.json and its
// section; TestRenderMatchesGolden and TestSoakSectionMatchesGolden hold every change to the
// report to them byte for byte (go test -run TestRenderMatchesGolden -update rewrites the first
// for a change that is meant).
//
// Subcommands:
//
//	suite run       run the scenarios, save results.json, write the doc and the plots
//	suite render    rewrite the doc and plots from a saved results.json (layout work)
//	suite soak      the long integrity run behind make soak (bench/soak.sh): the echo provider
//	                killed and restarted on schedule, checked bodies through `sidecar run`, and
//	                the sidecar's fds, goroutines and heap compared between warm-up and the end;
//	                writes the soak section of docs/benchmarks.md, which run and render keep
//	suite baseline  the accept-storm baseline: a Dubbo listener with a small backlog and a slow
//	                accept loop, like the incident's provider (run by `suite run` in the namespace)
//	suite storm-client  opens N connections at once from one thread (non-blocking connect, epoll),
//	                sends a heartbeat on each and times the answers (run by `suite run`, twice)
//
// Concurrency and lifetimes: the run is sequential, one scenario and one target at a time, so that
// measurements do not share the two cores. Every child process is started through a Suite, which
// records it; each scenario stops what it started before returning, and the Suite kills and reaps
// whatever is left (and removes its network namespace) on every exit path, signals included. Every
// child runs under a context with a deadline, so a hung process cannot hold the run past its bound.
// The only goroutines are per-process pipe readers and exit waiters, owned by their Proc (Wait and
// Kill wait for them), and the baseline listener's per-connection goroutines, which it closes and
// waits for before returning. storm-client runs on one locked OS thread with no goroutines.
package main
