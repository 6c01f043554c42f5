package keepalive

import (
	"math"
	"math/rand/v2"
	"time"
)

// Jitter returns d scaled by a uniform factor in [1-frac, 1+frac] (frac clamped to [0,1]); rng is a *rand.Rand
// (math/rand/v2) or nil for a goroutine-safe default source. A *rand.Rand is not safe for concurrent use, so a
// non-nil rng must be owned by the caller's goroutine.
//
// d <= 0 and frac <= 0 (or NaN) return d unchanged; the result is truncated to whole nanoseconds and saturates at
// the largest time.Duration.
func Jitter(d time.Duration, frac float64, rng *rand.Rand) time.Duration {
	if d <= 0 || !(frac > 0) {
		return d
	}
	frac = min(frac, 1)
	var u float64
	if rng != nil {
		u = rng.Float64()
	} else {
		u = rand.Float64()
	}
	f := float64(d) * (1 - frac + 2*frac*u)
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(f)
}

// Defaults a zero Backoff uses (Stormgate's reconnect settings: start 50 ms, cap 2 s).
const (
	DefaultBackoffBase = 50 * time.Millisecond
	DefaultBackoffMax  = 2 * time.Second
)

// Backoff: exponential with full jitter (AWS "full jitter": sleep = rand[0, min(cap, base*2^attempt))).
//
// The zero value is ready to use with the defaults. A Backoff is owned by one goroutine (one reconnect loop);
// it is not safe for concurrent use. Give each Backoff its own Rand, or leave Rand nil: the default source is
// seeded randomly per process, so a fleet of sidecars never reconnects in step.
type Backoff struct {
	// Base is the window of the first attempt. Zero or negative means DefaultBackoffBase.
	Base time.Duration
	// Max caps the window. Zero or negative means DefaultBackoffMax; a Max below Base means Base.
	Max time.Duration
	// Rand is the random source. Nil means the goroutine-safe default source of math/rand/v2.
	Rand *rand.Rand

	attempt int
}

// Next returns the next delay, uniform in [0, Ceiling()), and advances the attempt counter.
func (b *Backoff) Next() time.Duration {
	c := b.Ceiling()
	if b.attempt < math.MaxInt {
		b.attempt++
	}
	if b.Rand != nil {
		return time.Duration(b.Rand.Int64N(int64(c)))
	}
	return time.Duration(rand.Int64N(int64(c)))
}

// Ceiling returns the exclusive upper bound of the delay the next call to Next draws from:
// min(Max, Base*2^Attempt()). It is always > 0.
func (b *Backoff) Ceiling() time.Duration {
	base, cap := b.Base, b.Max
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if cap <= 0 {
		cap = DefaultBackoffMax
	}
	if cap < base {
		cap = base
	}
	// base<<a <= cap exactly when base <= cap>>a (non-negative integers); this never overflows.
	if b.attempt < 63 && base <= cap>>b.attempt {
		return base << b.attempt
	}
	return cap
}

// Reset starts over at attempt 0 (call it once a connection has proved healthy).
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempt returns how many delays Next has handed out since the last Reset.
func (b *Backoff) Attempt() int { return b.attempt }
