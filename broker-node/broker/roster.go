package broker

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Link is what the broker needs of a provider's connection. The link package
// implements it over a WebSocket; tests may implement it directly.
type Link interface {
	// Key is the provider's public key (64 lowercase hex).
	Key() string
	// Send queues one frame on the link's serialized writer; it fails
	// once the link is closed. It never blocks on the network.
	Send(frame []byte) error
	// SendNow sends a frame whose latency counts (a run offered): it is
	// written by the caller at once when the link is idle, so it may block
	// on a peer that stopped reading, until the link's write timeout or
	// its close; otherwise it is queued as by Send, except that it does
	// not count against the bound on frames waiting (wsconn.Conn.SendNow:
	// a burst of offers is funduq's own, one per run).
	SendNow(frame []byte) error
	// Close ends the link with a reason (the broker closes every link
	// when it stops leading).
	Close(reason string)
}

// AgentRef is an agent: (provider key, name).
type AgentRef struct {
	Key  string
	Name string
}

func (r AgentRef) String() string {
	k := r.Key
	if len(k) > 16 {
		k = k[:16]
	}
	return fmt.Sprintf("%s…/%s", k, r.Name)
}

var linkSeq atomic.Uint64

// linkState is the broker's record of one open link. Fields are guarded by
// Broker.mu.
type linkState struct {
	id       uint64
	link     Link
	key      string
	declared *int            // maxConcurrentRuns from the hello; nil = unlimited
	names    map[string]bool // the roster this link registered
	// registeredOnce: it has registered agents at some time, so an offer
	// may have reached it (what it reported before cannot answer one).
	registeredOnce bool
	// interjections lists the names that take a run addressed at their
	// thread's live run (registration's takesInterjections).
	interjections map[string]bool
	withdrawn     bool // withdrawn at tolerance: register is refused
	// replaced: a newer link of the key took over every agent it served;
	// it stays open, offered nothing, until it registers again or closes
	// (replaced.go), and what it holds passes to the key's next report
	// from another link.
	replaced bool
	// bare, when set, is called once the link, left serving nothing by a
	// delete, holds no run either (Broker.WhenBare). Guarded by b.mu.
	bare func()
	// free, when set, is called once the link holds no run, whatever it
	// serves: a withdrawn link is closed then (Broker.withdraw). Guarded
	// by b.mu.
	free   func()
	opened time.Time
	// backlog counts the events read from this link and not yet handled
	// by their lanes (stored, or dropped as a resend or a stray). When it
	// is full the link's read loop waits in Event: the broker stops reading
	// the provider until the writes catch up (backpressure).
	backlog  *backlog
	gone     chan struct{} // closed when the link is detached or leadership ends
	goneOnce sync.Once
	// keptN and keptBytes count the reports of this link kept in lanes
	// for its register (keep.go): at most half its backlog. Guarded by
	// b.mu.
	keptN, keptBytes int
	// moved holds the places kept on this link for runs whose offer to it
	// another link of its key answered, until it answers too or the
	// offer's deliver_timeout passes (moved.go). Guarded by b.mu.
	moved keptPlaces
	// unwinding holds the places kept on this link for runs funduq failed
	// for a report of the link's (a bad event) while it held them, until
	// it sends the run's finish or deliver_timeout passes (unwind.go).
	// Guarded by b.mu.
	unwinding keptPlaces
	// stall records the link's read loop waiting on a full backlog:
	// funduq not reading the provider, so an answer it sent meanwhile is
	// unread (onLapse).
	stall stall
}

// stall is a link's backpressure waits: how many began, and the one going
// on, if any (resumed is closed when it ends).
type stall struct {
	mu      sync.Mutex
	began   uint64
	resumed chan struct{} // nil: the link is being read
}

// begin marks the read loop waiting; end marks it reading again.
func (s *stall) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.began++
	s.resumed = make(chan struct{})
}

func (s *stall) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumed != nil {
		close(s.resumed)
		s.resumed = nil
	}
}

// since reports how many waits began, and the channel of the one going on
// (nil when the link is being read).
func (s *stall) since() (began uint64, resumed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resumed == nil {
		return s.began, nil
	}
	return s.began, s.resumed
}

// release counts handled events out of the link's backlog.
func (ls *linkState) release(cmds ...eventCmd) {
	for _, c := range cmds {
		ls.backlog.give(c.ord, len(c.ev))
	}
}

// handled counts a finish out of the link's backlog once the lane has
// taken it — the run's end written — or refused it: a query behind it is
// answered only then. Counting one out twice, or none (the zero
// finishCmd), does nothing.
func (c finishCmd) handled() {
	if c.link != nil {
		c.link.backlog.let(c.ord)
	}
}

func (ls *linkState) detached() { ls.goneOnce.Do(func() { close(ls.gone) }) }

func (ls *linkState) String() string { return fmt.Sprintf("link#%d(%s)", ls.id, short(ls.key)) }

// bucket is a provider key's capacity: what it declared and how many places
// are taken (an offer out or a claimed run). Keyed by key, not by agent: one
// identity has one budget across every agent it serves.
type bucket struct {
	declared *int
	inFlight int
}

func (b *bucket) hasRoom() bool { return b.declared == nil || b.inFlight < *b.declared }

// linkHasRoomLocked reports whether ls has room under its own declaration:
// the runs it holds a place or a claim for are fewer than its hello's
// maxConcurrentRuns. A key's bucket carries the last link's declaration,
// so a key split across processes is also bounded per link: a process is
// never offered more than it said it runs (design.md §The provider wire).
// Caller holds b.mu.
func (b *Broker) linkHasRoomLocked(ls *linkState) bool {
	return ls.declared == nil || len(b.byLink[ls])+len(ls.moved)+len(ls.unwinding) < *ls.declared
}

func (b *bucket) release() {
	if b.inFlight > 0 {
		b.inFlight--
	}
}

func short(key string) string {
	if len(key) > 16 {
		return key[:16]
	}
	return key
}

func sortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
