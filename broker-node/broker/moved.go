package broker

import "time"

// A place kept on the link an offer was sent to after another link of its
// key answered it (design.md D15, an offer out to one link of a key
// answered by another). The run and the key's place move with the
// answer (D15, answeredBy), but the process behind the offered link may
// have taken the offer into a slot as it came (our SDK acks at once) and
// holds it until it hears its own answer refused: offered another run in
// that place meanwhile, it declines it, and a decline with room counts
// misdeclared (D6) against a provider full of a run funduq sent it. So the
// offered link's own place (its declaration, linkHasRoomLocked) stays
// taken until that link answers the offer — its ack, decline or refusal,
// an event or finish of the run, refused or taken (heardOn) — or the
// offer's deliver_timeout passes, whichever comes first; then it is free
// and the heads waiting on its key are nudged.

// keepMovedLocked keeps ls's place taken for runID until d from now or ls
// answers for it. d is what was left of the offer's deliver_timeout when
// it moved; none left, nothing is kept. Caller holds b.mu.
func (b *Broker) keepMovedLocked(ls *linkState, runID string, d time.Duration) {
	b.keepPlaceLocked(ls, &ls.moved, runID, d)
}

// heardOn frees the place kept on l for runID (keepMovedLocked), if any:
// l answered the offer it was sent. Called once the answer is answered in
// turn (a refusal queued on the link, or the report taken), so an offer
// the freed place lets out is written to the link after it.
func (b *Broker) heardOn(l Link, runID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ls := b.links[l]; ls != nil {
		b.freeMovedLocked(ls, runID)
	}
}

// freeMovedLocked gives back the place kept on ls for runID. Caller holds
// b.mu.
func (b *Broker) freeMovedLocked(ls *linkState, runID string) {
	b.freePlaceLocked(ls, ls.moved, runID)
}

// dropMovedLocked stops the timers of every place kept on ls: the link is
// gone, or leadership ended. Caller holds b.mu.
func dropMovedLocked(ls *linkState) {
	ls.moved.stop()
	ls.unwinding.stop()
}
