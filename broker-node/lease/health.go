package lease

import (
	"errors"
	"fmt"
	"time"
)

// ErrStuck: the elector's loop has made no progress for longer than it
// can when it is working (Check; design.md §Failure, the lease).
var ErrStuck = errors.New("lease elector stuck")

// progressed records that the loop made progress at t: a campaign
// completed (won or not), leadership ended, or — renewal true — a leader's
// renewal landed (t its send time, from which the lease is sure).
func (e *Elector) progressed(t time.Time, renewal bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.progress = t
	if renewal {
		e.renewed = t
	}
}

// Check reports whether the elector's loop is alive at now, the liveness
// check a supervisor restarts the process on (what client-go's
// leaderelection HealthzAdaptor gives). It fails, wrapping ErrStuck, when
// a leader has not had a renewal land for longer than TTL + StuckAfter —
// its loop is blocked (a call that never returns) while Lead still
// believes it leads, for a working one steps down at TTL − Margin — or
// when a standby has not completed a campaign, won or lost, within
// StandbyStuckAfter. An elector not running (Run not called, or
// returned) is not stuck: nil.
func (e *Elector) Check(now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running {
		return nil
	}
	if e.leading {
		if since := now.Sub(e.renewed); since > e.Lease.ttl+e.StuckAfter {
			return fmt.Errorf("%w: leading, but no renewal has landed for %s (limit %s)",
				ErrStuck, since.Round(time.Millisecond), e.Lease.ttl+e.StuckAfter)
		}
		return nil
	}
	if since := now.Sub(e.progress); since > e.standbyStuckAfter() {
		return fmt.Errorf("%w: standing by, but no campaign has completed for %s (limit %s)",
			ErrStuck, since.Round(time.Millisecond), e.standbyStuckAfter())
	}
	return nil
}

// standbyStuckAfter is how long a working standby can go without
// completing a campaign: one campaign's bound, a cool-off, and three
// retries on top (a wait cut short by events only shortens it).
func (e *Elector) standbyStuckAfter() time.Duration {
	return e.campaignBound() + e.Cooloff + 3*e.RetryEvery
}
