// Package backoff is the one exponential backoff every retry loop in funduq
// uses (design.md "Failure, component by component"): the broker's reconnects
// to the intake, the SDK's reconnects, the store's transaction retries, the
// leader's bounded write retries and the node's and KYOK relay's loops. Each
// keeps its own figures; only the arithmetic is shared, so it is tested once.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Spread says on which side of the exponential wait the jitter falls.
type Spread int

const (
	// Under takes a random part of up to Jitter·d off the wait d: with
	// Jitter 0.5 this is "equal jitter", the wait lies in [d/2, d], so a
	// ceiling is never exceeded.
	Under Spread = iota
	// Over adds a random part of up to Jitter·d to the wait d: the wait
	// lies in [d, d+Jitter·d], so the first wait is never shorter than Min.
	Over
)

// Policy is one retry loop's figures. The zero Factor means doubling.
type Policy struct {
	Min    time.Duration // the wait before jitter after the first failure
	Max    time.Duration // ceiling on the wait before jitter; must be ≥ Min
	Factor int64         // growth per attempt; 0 means 2
	Jitter float64       // random fraction of the wait, in [0, 1]; 0 means none
	Spread Spread        // which side of the wait the jitter falls on
	// AtLeastMin raises a jittered wait below Min back to Min, so the first
	// retry is never sooner than Min even with Under.
	AtLeastMin bool
	// Rand returns a value in [0, n) for n > 0; nil means math/rand/v2.
	// Tests set it to fix the jitter.
	Rand func(n int64) int64
}

// Base is the wait after failed attempt n (1 for the first failure) before
// jitter: Min·Factorⁿ⁻¹, capped at Max. n below 1 counts as 1.
func (p Policy) Base(n int) time.Duration {
	f := p.Factor
	if f <= 0 {
		f = 2
	}
	d := p.Min
	for i := 1; i < n && d < p.Max; i++ {
		if d > p.Max/time.Duration(f) {
			d = p.Max // the next step passes the ceiling (and could overflow)
			break
		}
		d *= time.Duration(f)
	}
	return min(d, p.Max)
}

// Delay is the wait after failed attempt n (1 for the first failure): Base(n)
// with the policy's jitter.
func (p Policy) Delay(n int) time.Duration {
	d := p.Base(n)
	j := time.Duration(float64(d) * min(max(p.Jitter, 0), 1))
	if j > 0 {
		r := p.Rand
		if r == nil {
			r = rand.Int64N
		}
		if p.Spread == Under {
			d -= j
		}
		d += time.Duration(r(int64(j) + 1))
	}
	if p.AtLeastMin {
		d = max(d, p.Min)
	}
	return d
}
