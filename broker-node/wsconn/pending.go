package wsconn

import (
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/funduq/funduq-go/core/apierr"
)

// DefaultMaxPending is Pending's bound when none is set (config
// FUNDUQ_MAX_PENDING_LINKS' default).
const DefaultMaxPending = 1024

// Pending bounds the links, over /ws/provider and /ws/kyok together, that
// have not registered yet: in the handshake, or welcomed and within the
// register deadline (design.md §The provider wire, "Admission"). A key
// costs a stranger nothing, and each key opens links and holds each until
// the deadline, so without it the sockets, goroutines and buffers the
// leader holds were bounded only by how fast keys are minted. A link is
// counted from before its upgrade until it registers or ends; one that
// registered is not counted unless a delete left it serving nothing and
// holding no run (Place.Retake).
type Pending struct {
	// Max is the bound (0: DefaultMaxPending).
	Max int
	// Refused, when set, counts the upgrades refused at the bound.
	Refused func()

	n atomic.Int64
}

// Count is how many links are pending now.
func (p *Pending) Count() int { return int(p.n.Load()) }

func (p *Pending) max() int64 {
	if p == nil || p.Max <= 0 {
		return DefaultMaxPending
	}
	return int64(p.Max)
}

// Admit takes a place for a link about to be upgraded, or, at the bound,
// answers the request itself — 503 with Retry-After and the error body,
// as a standby answers an upgrade (D11), before the upgrade and the
// handshake, so nothing is spent, the ticket included — and returns
// ok false. release gives the place back; it may be called more than once
// (the link's register, then its end). A nil Pending admits everything.
func (p *Pending) Admit(w http.ResponseWriter) (release func(), ok bool) {
	if p == nil {
		return func() {}, true
	}
	max := p.max()
	for {
		n := p.n.Load()
		if n >= max {
			if p.Refused != nil {
				p.Refused()
			}
			w.Header().Set("Retry-After", "1")
			apierr.Write(w, http.StatusServiceUnavailable, apierr.New(apierr.CodePendingLinksFull,
				"funduq holds as many links that have not registered yet as it takes (FUNDUQ_MAX_PENDING_LINKS); try again later"))
			return nil, false
		}
		if p.n.CompareAndSwap(n, n+1) {
			break
		}
	}
	var once sync.Once
	return func() { once.Do(func() { p.n.Add(-1) }) }, true
}

// again counts one more link pending without the bound: a registered link
// left serving nothing (Place.Retake) is let be over it rather than closed,
// since the bound is there to refuse upgrades, before anything is spent
// (design.md §The provider wire, "Admission"). Its release is idempotent.
func (p *Pending) again() func() {
	if p == nil {
		return func() {}
	}
	p.n.Add(1)
	var once sync.Once
	return func() { once.Do(func() { p.n.Add(-1) }) }
}

// Place is one link's standing against Pending: counted from its upgrade
// until a register is answered (Leave), counted again when, after a
// delete, it serves nothing and holds no run (Retake), and given back for
// good when it ends (End). Safe for concurrent use.
type Place struct {
	mu      sync.Mutex
	pending *Pending
	release func() // nil: not counted now
	ended   bool
}

// NewPlace is the standing of a link Admit counted with release (nil: not
// counted) against p (nil: nothing is counted).
func NewPlace(p *Pending, release func()) *Place {
	return &Place{pending: p, release: release}
}

// Leave gives the place back: a register was answered.
func (pl *Place) Leave() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.release != nil {
		pl.release()
		pl.release = nil
	}
}

// End gives the place back for good: the link ended.
func (pl *Place) End() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.ended = true
	if pl.release != nil {
		pl.release()
		pl.release = nil
	}
}

// Retake counts the link pending again, past the bound if it is full. It
// reports false, counting nothing, if the link is counted now or ended.
func (pl *Place) Retake() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.ended || pl.release != nil {
		return false
	}
	pl.release = pl.pending.again()
	return true
}
