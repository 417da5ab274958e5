package wsconn

import (
	"fmt"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"
)

// RegisterDeadline closes a link that completes the handshake and has no
// register answered within its time (config FUNDUQ_REGISTER_DEADLINE,
// design.md §The provider wire, "Admission"): a key costs a stranger
// nothing, and a link that never registers would otherwise hold a socket
// and goroutines of the leader for as long as it answers pings. A link
// that is working without registering — one holding a run of its key it
// took a report for, as a process replaced by a newer one of its key
// finishes its runs (D5) — is given another period instead, at every
// lapse, for as long as it works. The zero value, and one started with no
// time, never closes anything.
type RegisterDeadline struct {
	mu      sync.Mutex
	timer   clockwork.Timer
	clock   clockwork.Clock
	d       time.Duration
	fire    func(gen int)
	gen     int  // the period: one more at each Restart
	met     bool // a register was answered
	lapsed  bool // the time ran out first
	stopped bool // the link ended
}

// StartRegisterDeadline closes c 1008 saying why when d passes (on clock;
// nil: the real one) before Met is called, unless working (nil: never)
// reports the link busy then, in which case the time starts again.
// d <= 0: no deadline.
func StartRegisterDeadline(c *Conn, clock clockwork.Clock, d time.Duration, working func() bool, onLapse func()) *RegisterDeadline {
	rd := &RegisterDeadline{}
	if d <= 0 {
		return rd
	}
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	reason := fmt.Sprintf("no register within %s of welcome (FUNDUQ_REGISTER_DEADLINE); reconnect and register", d)
	// gen tells a timer of this period from one a Met and a Restart
	// since left behind, which may fire all the same.
	var fire func(gen int)
	fire = func(gen int) {
		rd.mu.Lock()
		over := rd.met || rd.stopped || rd.gen != gen
		rd.mu.Unlock()
		if over {
			return
		}
		// Asked without rd.mu: working takes the broker's locks, under
		// which Met is called.
		busy := working != nil && working()
		rd.mu.Lock()
		if rd.met || rd.stopped || rd.gen != gen {
			rd.mu.Unlock()
			return
		}
		if busy {
			rd.timer = clock.AfterFunc(d, func() { fire(gen) })
			rd.mu.Unlock()
			return
		}
		rd.lapsed = true
		rd.mu.Unlock()
		if onLapse != nil {
			onLapse()
		}
		c.CloseWith(websocket.ClosePolicyViolation, reason)
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.clock, rd.d, rd.fire = clock, d, fire
	rd.timer = clock.AfterFunc(d, func() { fire(0) })
	return rd
}

// Restart starts the time over on a deadline that was met: the link,
// registered, was left serving nothing (design.md §The provider wire,
// "Admission"), so it registers again within the time or is closed as one
// that never registered. No-op on a deadline running, lapsed, stopped or
// with no time.
func (rd *RegisterDeadline) Restart() {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if !rd.met || rd.stopped || rd.fire == nil {
		return
	}
	rd.met = false
	rd.gen++
	gen, fire := rd.gen, rd.fire
	rd.timer = rd.clock.AfterFunc(rd.d, func() { fire(gen) })
}

// Met ends the deadline: a register was answered. Called before the
// answer is queued, so a provider that reads it is past the deadline.
func (rd *RegisterDeadline) Met() {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.met || rd.lapsed {
		return
	}
	rd.met = true
	if rd.timer != nil {
		rd.timer.Stop()
	}
}

// Lapsed reports whether the link was closed for not registering in time.
func (rd *RegisterDeadline) Lapsed() bool {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return rd.lapsed
}

// Stop ends the deadline when the link ends.
func (rd *RegisterDeadline) Stop() {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.stopped = true
	if rd.timer != nil {
		rd.timer.Stop()
	}
}
