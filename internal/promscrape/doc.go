// Package promscrape reads a Prometheus text endpoint (/metrics) for the harnesses: the e2e
// and interop tests, bench/suite and cmd/stormbench. Samples is one scrape, every sample by
// its series as exposed; Families is one scrape parsed by Prometheus's own parser, for
// histograms. Nothing here is shared between goroutines: each call makes its own request.
package promscrape
