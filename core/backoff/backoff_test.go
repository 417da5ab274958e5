package backoff

import (
	"math"
	"testing"
	"time"
)

const ms = time.Millisecond

func least(int64) int64  { return 0 }
func most(n int64) int64 { return n - 1 }

func TestBase(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Policy
		n    int
		want time.Duration
	}{
		{"first", Policy{Min: 50 * ms, Max: 2 * time.Second}, 1, 50 * ms},
		{"below one counts as one", Policy{Min: 50 * ms, Max: 2 * time.Second}, 0, 50 * ms},
		{"doubles", Policy{Min: 50 * ms, Max: 2 * time.Second}, 3, 200 * ms},
		{"last below cap", Policy{Min: 50 * ms, Max: 2 * time.Second}, 6, 1600 * ms},
		{"capped", Policy{Min: 50 * ms, Max: 2 * time.Second}, 7, 2 * time.Second},
		{"stays capped", Policy{Min: 50 * ms, Max: 2 * time.Second}, 1000, 2 * time.Second},
		{"huge attempt", Policy{Min: 50 * ms, Max: time.Duration(math.MaxInt64)}, math.MaxInt, time.Duration(math.MaxInt64)},
		{"factor four", Policy{Min: 50 * ms, Max: time.Second, Factor: 4}, 2, 200 * ms},
		{"factor four", Policy{Min: 50 * ms, Max: time.Second, Factor: 4}, 3, 800 * ms},
		{"factor four capped", Policy{Min: 50 * ms, Max: time.Second, Factor: 4}, 4, time.Second},
		{"min equals max", Policy{Min: time.Second, Max: time.Second}, 5, time.Second},
	} {
		if got := c.p.Base(c.n); got != c.want {
			t.Errorf("%s: Base(%d) = %v, want %v", c.name, c.n, got, c.want)
		}
		// Without jitter the delay is the base.
		if got := c.p.Delay(c.n); got != c.want {
			t.Errorf("%s: Delay(%d) without jitter = %v, want %v", c.name, c.n, got, c.want)
		}
	}
}

func TestDelayBounds(t *testing.T) {
	for _, c := range []struct {
		name   string
		p      Policy
		n      int
		lo, hi time.Duration // Delay with the least and the most jitter
	}{
		{"equal jitter", Policy{Min: 200 * ms, Max: 30 * time.Second, Jitter: 0.5, Spread: Under}, 1, 100 * ms, 200 * ms},
		{"equal jitter later", Policy{Min: 200 * ms, Max: 30 * time.Second, Jitter: 0.5, Spread: Under}, 4, 800 * ms, 1600 * ms},
		{"equal jitter capped", Policy{Min: 200 * ms, Max: 30 * time.Second, Jitter: 0.5, Spread: Under}, 40, 15 * time.Second, 30 * time.Second},
		{"at least min", Policy{Min: 100 * ms, Max: 5 * time.Second, Jitter: 0.5, Spread: Under, AtLeastMin: true}, 1, 100 * ms, 100 * ms},
		{"at least min later", Policy{Min: 100 * ms, Max: 5 * time.Second, Jitter: 0.5, Spread: Under, AtLeastMin: true}, 2, 100 * ms, 200 * ms},
		{"over", Policy{Min: 50 * ms, Max: 2 * time.Second, Jitter: 0.5, Spread: Over}, 1, 50 * ms, 75 * ms},
		{"over capped", Policy{Min: 50 * ms, Max: 2 * time.Second, Jitter: 0.5, Spread: Over}, 9, 2 * time.Second, 3 * time.Second},
		{"over factor four", Policy{Min: 50 * ms, Max: 200 * ms, Factor: 4, Jitter: 0.5, Spread: Over}, 2, 200 * ms, 300 * ms},
		{"full jitter", Policy{Min: 50 * ms, Max: time.Second, Jitter: 1, Spread: Under}, 2, 0, 100 * ms},
		{"jitter above one is one", Policy{Min: 50 * ms, Max: time.Second, Jitter: 7, Spread: Under}, 2, 0, 100 * ms},
		{"negative jitter is none", Policy{Min: 50 * ms, Max: time.Second, Jitter: -1}, 2, 100 * ms, 100 * ms},
	} {
		p := c.p
		p.Rand = least
		lo := p.Delay(c.n)
		p.Rand = most
		hi := p.Delay(c.n)
		if lo != c.lo || hi != c.hi {
			t.Errorf("%s: Delay(%d) spans [%v, %v], want [%v, %v]", c.name, c.n, lo, hi, c.lo, c.hi)
		}
		// The default source stays within the same bounds.
		p.Rand = nil
		for range 100 {
			if d := p.Delay(c.n); d < c.lo || d > c.hi {
				t.Fatalf("%s: Delay(%d) = %v outside [%v, %v]", c.name, c.n, d, c.lo, c.hi)
			}
		}
	}
}

// The jitter source is asked for a value in [0, j+1) with j the jitter's
// whole span, so both ends of the span are reachable.
func TestRandAskedForWholeSpan(t *testing.T) {
	var asked int64
	p := Policy{Min: 100 * ms, Max: time.Second, Jitter: 0.5, Rand: func(n int64) int64 { asked = n; return 0 }}
	p.Delay(1)
	if want := int64(50*ms) + 1; asked != want {
		t.Errorf("Rand asked for [0, %d), want [0, %d)", asked, want)
	}
}
