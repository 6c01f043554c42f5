package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
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
