// Package fleet holds the result of `stormbench xds-fleet` (the control plane
// at fleet scale): what the tool writes with --json, and what the benchmark
// suite (docs/benchmarks.md section 6) and the e2e failover test read back.
// Plain values, no behaviour beyond Change.Failures; safe to copy.
package fleet
