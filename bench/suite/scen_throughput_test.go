package main

import (
	"slices"
	"testing"
	"time"
)

// The ladder doubles to the first failure, then bisects TPRefine times (to 500 req/s steps).
func TestLadder(t *testing.T) {
	for _, c := range []struct {
		capacity float64
		tried    []float64
		max      float64
	}{
		{27000, []float64{5000, 10000, 20000, 40000, 30000, 25000}, 25000},
		{3000, []float64{5000}, 0},                         // even the first rate fails: no maximum, a bound
		{1e9, []float64{5000, 10000, 20000, 40000}, 40000}, // stops at the highest rate allowed
	} {
		l := &ladder{rate: 5000}
		var tried []float64
		for {
			r, ok := l.next()
			if !ok {
				break
			}
			tried = append(tried, r)
			l.record(r, r <= c.capacity, 40000, 2)
			if len(tried) > 20 {
				t.Fatal("the ladder does not end")
			}
		}
		if !slices.Equal(tried, c.tried) || l.se.Max != c.max {
			t.Errorf("capacity %v: tried %v max %v; want %v max %v", c.capacity, tried, l.se.Max, c.tried, c.max)
		}
	}
}

func TestMarginalFailure(t *testing.T) {
	limit := 50 * time.Millisecond
	for _, c := range []struct {
		st   TPStep
		want bool
	}{
		{TPStep{Sent: 1000, SteadyP99ms: 57}, true},
		{TPStep{Sent: 1000, SteadyP99ms: 101}, false},
		{TPStep{Sent: 1000, Failed: 20, SteadyP99ms: 10}, false},
		{TPStep{Sent: 0}, false},
	} {
		if got := marginal(c.st, limit); got != c.want {
			t.Errorf("marginal(%+v) = %v, want %v", c.st, got, c.want)
		}
	}
}
