package proxy

import "github.com/prometheus/client_golang/prometheus"

// Provider lifecycle: what Stormgate does with requests while a provider starts,
// stops gracefully or dies, so that consumers see none of it when the provider's
// own answers or the kernel prove that a request never ran. docs/design.md has the
// table of provider events; in short:
//
//	| event                                   | requests
//	|-----------------------------------------|------------------------------------------------------------
//	| connection opens (start, restart)       | a not-executed answer within hold.not_executed_window is
//	|                                         | re-held (at most hold.not_executed_retries times, within the
//	|                                         | request's hold deadline); the pool pauses backoff_base,
//	|                                         | doubling, before sending again
//	| READONLY, or a closing=true answer      | drain: no connection of the provider takes new requests; they
//	|                                         | wait in the hold queue; in flight ones finish; READONLY
//	|                                         | connections close once empty; a request whose hold ends while
//	|                                         | the provider still serves is sent to it rather than failed
//	| WRITEABLE, drain.timeout, or, once the  | drain ends: connections take requests again (after a
//	| old connections are closed, a refused   | refused dial, new connections take them at once)
//	| dial or a heartbeat answered on a new   |
//	| connection                              |
//	| the provider's socket destroyed (any    | every request past what its application read (the kernel's
//	| end, announced by sock_diag)            | announcement: peerdiag.go) is re-held; the rows below are the
//	|                                         | fallback when no announcement comes
//	| FIN (provider closed, queue empty)      | requests the provider's kernel never acknowledged are re-held,
//	|                                         | once it refuses them with a RST (its socket is gone)
//	| RST (provider closed with unread bytes) | the last request handed to the kernel is re-held, if the
//	|                                         | namespace's reset counters rule out a SO_LINGER 0 abort
//	| anything else, silence                  | may have run: CHANNEL_INACTIVE, never retried
//
//
// One concern per file: replay.go keeps the bytes of sent requests for re-holding;
// peerend.go and peerdiag.go prove what a dead provider read; notrun.go re-holds
// not-executed answers; providerdrain.go drains a provider that shuts down gracefully.

// lifeMetrics are the lifecycle's counters.
type lifeMetrics struct {
	notRun     map[string]*[nNotRunOutcomes]prometheus.Counter
	drains     [nProviderDrainTriggers]prometheus.Counter
	vetoed     prometheus.Counter
	collectors []prometheus.Collector
}

func newLifeMetrics(reasons []string) lifeMetrics {
	m := lifeMetrics{notRun: make(map[string]*[nNotRunOutcomes]prometheus.Counter, len(reasons)+1)}
	reasons = append(reasons[:len(reasons):len(reasons)], "unknown")
	notRun := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_not_executed_answers_total",
		Help: "Provider answers proving the request never ran (service not exported yet or any more, thread pool " +
			"full), by answer and outcome: reheld (back to the hold queue, sent again), passed_on (retries or hold " +
			"deadline used up), outside_window (not within hold.not_executed_window of a connect or state change)."},
		[]string{"reason", "outcome"})
	for _, r := range reasons {
		var cs [nNotRunOutcomes]prometheus.Counter
		for i := range cs {
			cs[i] = notRun.WithLabelValues(r, notRunOutcomeNames[i])
		}
		m.notRun[r] = &cs
	}
	drains := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stormgate_provider_drains_total",
		Help: "Graceful shutdowns of the provider seen, by signal (readonly: a READONLY event; closing: an answer " +
			"carrying closing=true)."}, []string{"trigger"})
	for i := range m.drains {
		m.drains[i] = drains.WithLabelValues(drainTriggerNames[i])
	}
	m.vetoed = prometheus.NewCounter(prometheus.CounterOpts{Name: "stormgate_unread_proof_vetoed_total",
		Help: "Provider connections that ended with a FIN or RST whose requests could not be proven unread because " +
			"the network namespace's kernel counted resets that prove nothing (SO_LINGER 0 aborts, timeouts) in the " +
			"meantime, or no reset for unread bytes: their requests were answered as lost instead of sent again."})
	m.collectors = []prometheus.Collector{notRun, drains, m.vetoed}
	return m
}

// notRunCounter returns the counter of one answer and outcome; reasons the codec
// did not list at start share the "unknown" series.
func (m *lifeMetrics) notRunCounter(why string, o NotRunOutcome) prometheus.Counter {
	cs, ok := m.notRun[why]
	if !ok {
		cs = m.notRun["unknown"]
	}
	return cs[o]
}
