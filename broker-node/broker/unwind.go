package broker

import (
	"time"

	"github.com/funduq/funduq-go/core/wire"
)

// A place kept on a link for a run funduq failed for one of the link's
// reports — a malformed, oversized or over-limit event — while the link
// held it (design.md §Counters, D18). funduq ended the run and told the
// provider so, but the provider is still running it until it has unwound
// it, and it says so with the run's finish (refused: the run has ended).
// Were the place freed with the run, the next run would be offered into it
// at once, and a provider that declared room for one would decline it,
// full of the run it is unwinding: a decline with room counts misdeclared
// (D6), and a bad event would move a counter that withdraws, which D18
// rules out. So the link's own place (linkHasRoomLocked) stays taken
// until its finish for the run is read, or deliver_timeout passes (a
// provider that never finishes gets its place back), whichever comes
// first; then the heads waiting on its key are nudged.

// The same place is kept for a late ack refused because the run ended
// meanwhile (design.md §Counters, misdeclared): the run's offer to the
// key lapsed (counted unanswered), the run ended unclaimed (a caller's
// cancel of the queued run), and the key's ack, read after, is refused
// "the run has ended". The provider took the run as it came and unwinds
// it now; the lapse was counted, and the decline of a run offered into
// its place meanwhile would count misdeclared on top. Kept only for the
// key the offer lapsed on, once (endedRuns.takeLapsed): a stranger's
// ack, or one from a key never offered the run, keeps nothing.

// keepLateAcked keeps the place of l, registered, for runID when its
// accept is refused "the run has ended" and the run ended unclaimed after
// its offer to l's key lapsed. Called before the refusal is queued, so no
// offer slips into the place meanwhile.
func (b *Broker) keepLateAcked(l Link, runID string, v wire.Verdict) {
	if v != wire.Accepted {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := b.links[l]
	if !registeredLocked(ls) || !b.ended.takeLapsed(runID, ls.key) {
		return
	}
	b.keepUnwindingLocked(ls, runID, b.set.DeliverTimeout)
}

// keepUnwindingLocked keeps ls's place taken for runID until ls sends the
// run's finish or d passes. Caller holds b.mu.
func (b *Broker) keepUnwindingLocked(ls *linkState, runID string, d time.Duration) {
	b.keepPlaceLocked(ls, &ls.unwinding, runID, d)
}

// heardFinishOn frees the place kept on l for runID (keepUnwindingLocked),
// if any: l finished the run. Called once the finish is answered, so an
// offer the freed place lets out is written to the link after the answer.
func (b *Broker) heardFinishOn(l Link, runID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ls := b.links[l]; ls != nil {
		b.freeUnwindingLocked(ls, runID)
	}
}

// freeUnwindingLocked gives back the place kept on ls for runID. Caller
// holds b.mu.
func (b *Broker) freeUnwindingLocked(ls *linkState, runID string) {
	b.freePlaceLocked(ls, ls.unwinding, runID)
}
