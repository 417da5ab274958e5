package provider

import (
	"math/rand/v2"
	"time"
)

// delay is the wait before reconnect attempt n (0-based count of consecutive
// failures): Min·2ⁿ capped at Max, of which a random part of up to one half is
// taken off ("equal jitter"), so a fleet that lost the same broker does not
// come back in lockstep.
func (b Backoff) delay(n int) time.Duration {
	d := b.Max
	if n < 62 {
		if step := b.Min << uint(n); step > 0 && step < b.Max && step>>uint(n) == b.Min {
			d = step
		}
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return d - half + rand.N(half+1)
}
