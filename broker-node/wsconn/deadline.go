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
// and goroutines of the leader for as long as it answers pings. The zero
// value, and one started with no time, never closes anything.
type RegisterDeadline struct {
	mu     sync.Mutex
	timer  clockwork.Timer
	met    bool // a register was answered
	lapsed bool // the time ran out first
}

// StartRegisterDeadline closes c 1008 saying why when d passes (on clock;
// nil: the real one) before Met is called. d <= 0: no deadline.
func StartRegisterDeadline(c *Conn, clock clockwork.Clock, d time.Duration, onLapse func()) *RegisterDeadline {
	rd := &RegisterDeadline{}
	if d <= 0 {
		return rd
	}
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	reason := fmt.Sprintf("no register within %s of welcome (FUNDUQ_REGISTER_DEADLINE); reconnect and register", d)
	rd.mu.Lock()
	defer rd.mu.Unlock()
	rd.timer = clock.AfterFunc(d, func() {
		rd.mu.Lock()
		if rd.met {
			rd.mu.Unlock()
			return
		}
		rd.lapsed = true
		rd.mu.Unlock()
		if onLapse != nil {
			onLapse()
		}
		c.CloseWith(websocket.ClosePolicyViolation, reason)
	})
	return rd
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
	if rd.timer != nil {
		rd.timer.Stop()
	}
}
