package proxy

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestLivenessNeverKillsAResponsiveProvider runs the heartbeat check over every
// interval/jitter/max_missed combination the settings allow (a grid of them) with
// checks at jittered times, against a provider that answers each heartbeat within
// a delay far below the interval: the connection is never declared dead. Against a
// provider that never answers it is declared dead, within the documented bound.
func TestLivenessNeverKillsAResponsiveProvider(t *testing.T) {
	intervals := []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, time.Hour}
	jitters := []float64{0, 0.1, 0.2, 0.5}
	for _, interval := range intervals {
		for _, jitter := range jitters {
			for _, maxMissed := range []int{1, 2, 3, 10, 100} {
				name := fmt.Sprintf("%v/%v/%d", interval, jitter, maxMissed)
				rng := rand.New(rand.NewPCG(uint64(interval), uint64(maxMissed)))
				next := func() time.Duration { // keepalive.Jitter's distribution, from this rng
					return time.Duration(float64(interval) * (1 + jitter*(2*rng.Float64()-1)))
				}
				// Responsive: each heartbeat is answered after a delay of up to a tenth of the interval.
				var l liveness
				now, lastRead := int64(0), int64(0)
				sent := 0
				for range 500 {
					now += int64(next())
					send, dead := l.check(now, lastRead, lastRead, 0, interval, maxMissed)
					if dead {
						t.Fatalf("%s: a provider that answers every heartbeat was declared dead", name)
					}
					if send {
						sent++
						lastRead = now + int64(rng.Float64()*float64(interval)/10)
					}
				}
				// Idle: a heartbeat every check, as Java sends one every interval.
				if sent < 490 {
					t.Fatalf("%s: %d heartbeats in 500 checks of an idle connection", name, sent)
				}
				// Silent: dead within (maxMissed + 1) intervals of silence plus two check periods.
				l = liveness{}
				now, lastRead = 0, 0
				bound := int64(maxMissed+1)*int64(interval) + 2*int64(float64(interval)*(1+jitter))
				for {
					now += int64(next())
					if _, dead := l.check(now, lastRead, 0, 0, interval, maxMissed); dead {
						break
					}
					if now > bound {
						t.Fatalf("%s: a silent provider still alive after %v (bound %v)", name,
							time.Duration(now), time.Duration(bound))
					}
				}
			}
		}
	}
}

// TestLivenessBusyConnectionSendsNoHeartbeat: requests written and answers read in
// every period mean no heartbeat; writes alone (a provider that stopped answering
// but still reads) or reads alone (our own heartbeat answers) do not count as both.
func TestLivenessBusyConnectionSendsNoHeartbeat(t *testing.T) {
	interval := 30 * time.Second
	var l liveness
	for i := int64(1); i < 100; i++ {
		now := i * int64(interval)
		if send, dead := l.check(now, now-int64(time.Second), 0, uint64(i), interval, 3); send || dead {
			t.Fatalf("check %d: send=%v dead=%v on a connection read from and written to every period", i, send, dead)
		}
	}
	var w liveness // writes, no reads
	if send, _ := w.check(int64(interval), 0, 0, 1, interval, 3); !send {
		t.Fatal("no heartbeat on a connection that was written to but never answered")
	}
}
