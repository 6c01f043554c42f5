package main

import (
	"regexp"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// registerBuildInfo registers stormgate_build_info{version,go}: which build
// runs where, for dashboards and for joining Stormgate's own series (the
// process_* metrics of a pod that also runs an exporter of the provider).
func registerBuildInfo(reg prometheus.Registerer) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "stormgate_build_info",
		Help: "Always 1: the Stormgate version and the Go version it was built with.",
	}, []string{"version", "go"})
	g.WithLabelValues(version, runtime.Version()).Set(1)
	return reg.Register(g)
}

// newGoCollector is the Go runtime collector with, besides the classic go_memstats_*
// series, go_gc_heap_live_bytes (the heap the last garbage collection found live: the
// figure to watch for a leak, since go_memstats_heap_* also count whatever was
// allocated since) and go_gc_heap_goal_bytes (where the next collection starts).
func newGoCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/(live|goal):bytes$`)}))
}
