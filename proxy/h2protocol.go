package proxy

import "github.com/prometheus/client_golang/prometheus"

// h2Protocol is HTTP/2's server-wide state (Triple, gRPC), shared by its consumer sessions and its pools:
// today its metrics. It is the start of the Protocol a protocol package will hand the core (design §14.6,
// step 5b): its status names, its not-executed answers and its collectors.
type h2Protocol struct {
	m          h2Metrics
	collectors []prometheus.Collector
}

func newH2Protocol() *h2Protocol {
	m, cs := newH2Metrics()
	return &h2Protocol{m: m, collectors: cs}
}
