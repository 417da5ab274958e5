package provider

import (
	"time"

	"github.com/funduq/funduq-go/core/backoff"
)

// delay is the wait before reconnect attempt n (0-based count of consecutive
// failures): Min·2ⁿ capped at Max, of which a random part of up to one half is
// taken off ("equal jitter"), so a fleet that lost the same broker does not
// come back in lockstep. Unlike the broker's intake reconnects it may wait
// less than Min (as little as Min/2).
func (b Backoff) delay(n int) time.Duration {
	return backoff.Policy{Min: b.Min, Max: b.Max, Jitter: 0.5, Spread: backoff.Under}.Delay(n + 1)
}
