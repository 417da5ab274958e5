package broker

import (
	"slices"
	"sort"
	"time"
)

// runIndex is how the broker finds its lanes: by run, by the run an
// interjection addresses, and by thread in arrival order (D2). Guarded by
// Broker.mu, like every lane field the roster and the sweep read.
type runIndex struct {
	lanes      map[string]*lane
	addressing map[string][]*lane // per run, the interjection lanes addressing it
	threads    map[string][]*lane // per thread, the unclaimed runs in arrival order
	// headsByKey lists, per provider key, the threads whose head run is
	// for one of the key's agents: a place freed on a key is news to
	// those heads alone, found without a scan of every thread.
	headsByKey map[string]map[string]*lane
	// byLink lists, per link, the lanes it holds a place or a claim for:
	// a closed link tells those lanes alone, found without a scan.
	byLink map[*linkState]map[*lane]struct{}
	// lostHeld lists, per provider key, the lanes held for it after a
	// link lost without a close frame whose key has not re-attached
	// since: the key's register finds them there (design.md D5).
	lostHeld map[string]map[*lane]struct{}
	// keptOn lists, per link, the lanes keeping reports it sent before
	// its register (keep.go): its register or its close wakes them.
	keptOn map[*linkState]map[*lane]struct{}
	// keptBell is closed, and replaced, whenever a link gets reports kept
	// for its register (KeptForRegister); nil until someone listens.
	keptBell chan struct{}
}

func newRunIndex() runIndex {
	return runIndex{lanes: map[string]*lane{}, addressing: map[string][]*lane{}, threads: map[string][]*lane{},
		headsByKey: map[string]map[string]*lane{}, byLink: map[*linkState]map[*lane]struct{}{},
		lostHeld: map[string]map[*lane]struct{}{}, keptOn: map[*linkState]map[*lane]struct{}{}}
}

// holdLocked sets the links l is claimed by and offered to, keeping byLink
// in step. Every write of those two fields goes through here. Caller holds
// b.mu.
func (b *Broker) holdLocked(l *lane, claimedBy, offeredTo *linkState) {
	for _, old := range [2]*linkState{l.claimedBy, l.offeredTo} {
		if old != nil && old != claimedBy && old != offeredTo {
			b.unlinkLocked(old, l)
		}
	}
	l.claimedBy, l.offeredTo = claimedBy, offeredTo
	if l.ended { // a forgotten lane is no link's news
		return
	}
	for _, ls := range [2]*linkState{claimedBy, offeredTo} {
		if ls == nil {
			continue
		}
		m := b.byLink[ls]
		if m == nil {
			m = map[*lane]struct{}{}
			b.byLink[ls] = m
		}
		m[l] = struct{}{}
	}
}

// unlinkLocked drops l from what ls holds. Caller holds b.mu.
func (b *Broker) unlinkLocked(ls *linkState, l *lane) {
	m := b.byLink[ls]
	delete(m, l)
	if len(m) == 0 {
		delete(b.byLink, ls)
		if f := ls.bare; f != nil && !b.servesLocked(ls) {
			ls.bare = nil
			f()
		}
		if f := ls.free; f != nil {
			ls.free = nil
			f()
		}
	}
}

// lostHeldLocked lists l as held for key after a lost link. Caller holds
// b.mu.
func (b *Broker) lostHeldLocked(key string, l *lane) {
	m := b.lostHeld[key]
	if m == nil {
		m = map[*lane]struct{}{}
		b.lostHeld[key] = m
	}
	m[l] = struct{}{}
}

// unlostHeldLocked drops l from lostHeld: its key re-attached or reported
// for it, or it ended. Caller holds b.mu.
func (b *Broker) unlostHeldLocked(l *lane) {
	m := b.lostHeld[l.adoptKey]
	if m == nil {
		return
	}
	delete(m, l)
	if len(m) == 0 {
		delete(b.lostHeld, l.adoptKey)
	}
}

// setThreadLocked stores thread's queue dq, whose head was oldHead (nil:
// the thread had none), and keeps headsByKey in step. Caller holds b.mu.
func (b *Broker) setThreadLocked(thread string, oldHead *lane, dq []*lane) {
	if oldHead != nil {
		if m := b.headsByKey[oldHead.agent.Key]; m != nil {
			delete(m, thread)
			if len(m) == 0 {
				delete(b.headsByKey, oldHead.agent.Key)
			}
		}
	}
	if len(dq) == 0 {
		delete(b.threads, thread)
		return
	}
	b.threads[thread] = dq
	m := b.headsByKey[dq[0].agent.Key]
	if m == nil {
		m = map[string]*lane{}
		b.headsByKey[dq[0].agent.Key] = m
	}
	m[thread] = dq[0]
}

// headOf returns the first of dq, or nil.
func headOf(dq []*lane) *lane {
	if len(dq) == 0 {
		return nil
	}
	return dq[0]
}

// interjectionTargetLocked returns the link an interjection goes straight
// to: the one holding the run it addresses, while that run is claimed and
// its agent takes interjections. Otherwise nil: the run is an ordinary
// turn (a target that ended first degrades it to one). Caller holds b.mu.
func (b *Broker) interjectionTargetLocked(l *lane) *linkState {
	if l.addressed == "" {
		return nil
	}
	t := b.lanes[l.addressed]
	if t == nil || t.ended || t.claimedBy == nil || t.threadID != l.threadID {
		return nil
	}
	ls := t.claimedBy
	if b.served[l.agent] != ls || !ls.interjections[l.agent.Name] {
		return nil
	}
	return ls
}

// addLaneLocked registers a lane under the leadership it is born into (its
// epoch, fixed for its life), and an interjection under the run it
// addresses (a claim then nudges only those, not every lane). Caller holds
// b.mu.
func (b *Broker) addLaneLocked(l *lane) {
	l.epoch = b.epoch
	b.lanes[l.id] = l
	if l.addressed != "" {
		b.addressing[l.addressed] = append(b.addressing[l.addressed], l)
	}
}

// unaddressLocked drops a forgotten interjection from addressing. Caller
// holds b.mu.
func (b *Broker) unaddressLocked(l *lane) {
	if l.addressed == "" {
		return
	}
	ls := slices.DeleteFunc(b.addressing[l.addressed], func(x *lane) bool { return x == l })
	if len(ls) == 0 {
		delete(b.addressing, l.addressed)
	} else {
		b.addressing[l.addressed] = ls
	}
}

// leaveThreadLocked takes l out of its thread's queue and nudges the new head.
func (b *Broker) leaveThreadLocked(l *lane) {
	dq := b.threads[l.threadID]
	oldHead := headOf(dq)
	for i, x := range dq {
		if x == l {
			dq = append(dq[:i:i], dq[i+1:]...)
			break
		}
	}
	b.setThreadLocked(l.threadID, oldHead, dq)
	if len(dq) > 0 {
		b.nudgeLocked(dq[0])
	}
}

// joinThreadLocked puts l into its thread's queue in arrival order.
func (b *Broker) joinThreadLocked(l *lane, arrival time.Time) {
	dq := b.threads[l.threadID]
	oldHead := headOf(dq)
	i := sort.Search(len(dq), func(i int) bool { return dq[i].queuedAt.After(arrival) })
	dq = append(dq, nil)
	copy(dq[i+1:], dq[i:])
	dq[i] = l
	b.setThreadLocked(l.threadID, oldHead, dq)
}

// interjectionLostLocked reports whether a run addressing another (its
// forwardedProps.funduq.addressedRunId) lost it: the target is not live now.
func (b *Broker) interjectionLostLocked(addressed string) bool {
	if addressed == "" {
		return false
	}
	target := b.lanes[addressed]
	return target == nil || target.ended
}

// nudgeLocked asks l to try once; several reasons at once coalesce into one
// try in its queue. Caller holds b.mu.
func (b *Broker) nudgeLocked(l *lane) {
	if l.ended || l.dispatchPending {
		return
	}
	l.dispatchPending = true
	l.q.push(tryCmd{})
}

// nudgeHeadsOfKeyLocked asks the thread heads of key's agents to try: a
// place freed on key (its bucket) is news to them alone. Caller holds b.mu.
func (b *Broker) nudgeHeadsOfKeyLocked(key string) {
	for _, head := range b.headsByKey[key] {
		b.nudgeLocked(head)
	}
}

// nudgeHeadsLocked asks every thread's head to try. Caller holds b.mu.
func (b *Broker) nudgeHeadsLocked() {
	for _, dq := range b.threads {
		if len(dq) > 0 {
			b.nudgeLocked(dq[0])
		}
	}
}
