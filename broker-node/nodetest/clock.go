package nodetest

import (
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock is the harness's fake clock as the node sees it. clockwork runs an
// AfterFunc callback (an offer's lapse, a held run's grace, a register
// deadline) on a goroutine of its own once Advance has passed its time, so
// right after Advance the broker may not yet have been told what the clock
// fired, and a settled broker proves nothing. Clock knows which callbacks
// are due and not yet run; Settle waits for them as for the lanes.
//
// The clock moves only through Advance, under mu, and AfterFunc reads the
// time it counts from under mu too: a timer's due time is the one the fake
// clock fires it at.
type Clock struct {
	*clockwork.FakeClock
	mu    sync.Mutex
	armed map[*timer]time.Time // a callback not yet run → the time it is due
}

func newClock(at time.Time) *Clock {
	return &Clock{FakeClock: clockwork.NewFakeClockAt(at), armed: map[*timer]time.Time{}}
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.FakeClock.Advance(d)
}

// AfterFunc is clockwork's, its callback tracked until it has run.
func (c *Clock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	tm := &timer{c: c, f: f}
	tm.arm(d)
	return tm
}

// firing reports a callback whose time has come that has not run yet.
func (c *Clock) firing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.FakeClock.Now()
	for _, at := range c.armed {
		if !at.After(now) {
			return true
		}
	}
	return false
}

// timer is one AfterFunc; gen tells a callback of an earlier arming (Reset
// after it fired) from the current one.
type timer struct {
	c   *Clock
	f   func()
	t   clockwork.Timer
	gen int
}

// arm (re)starts tm for d from now. c.mu is held.
func (tm *timer) arm(d time.Duration) {
	c := tm.c
	tm.gen++
	gen := tm.gen
	c.armed[tm] = c.FakeClock.Now().Add(d)
	tm.t = c.FakeClock.AfterFunc(d, func() {
		tm.f()
		c.mu.Lock()
		if tm.gen == gen {
			delete(c.armed, tm)
		}
		c.mu.Unlock()
	})
}

func (tm *timer) Chan() <-chan time.Time { return nil }

func (tm *timer) Stop() bool {
	c := tm.c
	c.mu.Lock()
	defer c.mu.Unlock()
	stopped := tm.t.Stop()
	if stopped {
		delete(c.armed, tm)
	}
	return stopped
}

func (tm *timer) Reset(d time.Duration) bool {
	c := tm.c
	c.mu.Lock()
	defer c.mu.Unlock()
	active := tm.t.Stop()
	tm.arm(d)
	return active
}
