package broker

import (
	"encoding/json"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// command is what a lane's queue holds: one of the structs below, and
// nothing else (the unexported method seals the set), so the lane's switch
// over them is over a closed list.
type command interface{ laneCommand() }

// The commands a lane receives. Outsiders say what happened; the lane decides.
type (
	tryCmd     struct{} // a chance to be offered (coalesced)
	verdictCmd struct { // the provider's answer to an offer
		link   *linkState
		v      wire.Verdict
		reason string
		// registered: the link had registered agents when this was read
		// (lane.keyAnswers).
		registered bool
		// offerable: the link had registered at some time when this was
		// read (claimByReport).
		offerable bool
		// reviewed: an accept kept for its link's register and read
		// again (keep.go): it is not kept a second time.
		reviewed bool
	}
	lapseCmd struct{ offer uint64 } // the offer's deliver_timeout passed
	// offeringDueCmd: the offer has been out Settings.OfferingAfter.
	offeringDueCmd struct{ offer uint64 }
	eventCmd       struct { // the provider reported an event
		link *linkState
		ev   json.RawMessage
		pseq *int64
		bad  error // the event failed the frame's strict check (MalformedEvent)
		// tooBig: bad is an event frame over the link's frame limit,
		// dropped unread (OversizedEvent).
		tooBig bool
		ord    uint64 // its place in the link's backlog (backlog.take)
		// registered: the link had registered agents when this was read
		// (lane.keyAnswers).
		registered bool
		// offerable: the link had registered at some time when this was
		// read (claimByReport).
		offerable bool
		// reviewed: kept for its link's register and read again
		// (keep.go): it is not kept a second time.
		reviewed bool
	}
	finishCmd struct { // the provider's stream ended
		link *linkState
		ord  uint64 // its ordinal in the link's backlog (backlog.hold); 0: none
		// registered: the link had registered agents when this was read
		// (lane.keyAnswers).
		registered bool
		// offerable: the link had registered at some time when this was
		// read (claimByReport).
		offerable bool
		// reviewed: kept for its link's register and read again
		// (keep.go): it is not kept a second time.
		reviewed bool
	}
	cancelCmd struct{} // someone asked for a cancel
	goneCmd   struct { // the link the run was offered to or claimed by closed
		link *linkState
		lost bool // without the provider's close frame
	}
	// replacedCmd: the link the run was offered to or claimed by was left
	// serving nothing by a newer link of its key; it stays open
	// (replaced.go).
	replacedCmd struct{ link *linkState }
	failCmd     struct{ reason run.Reason } // a verdict that fails the run
	expireCmd   struct{}                    // the sweep: nobody served the agent past the window
	// orphanCmd: provider_grace or the link grace passed with nobody
	// re-adopting a held run. gen is the hold's timer it came from
	// (lane.orphanGen): one a re-attach replaced says nothing.
	orphanCmd struct{ gen uint64 }
	// reattachCmd: the key holding a run its lost link left registered the
	// run's agent again, on link, at at (design.md D5).
	reattachCmd struct {
		link *linkState
		at   time.Time
	}
	// unreserveCmd: the link grace passed for the place a run offered on
	// a lost link kept on its key (onGone).
	unreserveCmd struct{}
	// storedEndCmd: a held run read back at takeover had already stored
	// its terminal event; its finish was lost with the old leader.
	storedEndCmd struct{}
	// keptCmd: the link whose reports the lane keeps for its register
	// registered or went (keep.go, Broker.wakeKeptLocked).
	keptCmd struct{}
)

func (tryCmd) laneCommand()         {}
func (verdictCmd) laneCommand()     {}
func (lapseCmd) laneCommand()       {}
func (offeringDueCmd) laneCommand() {}
func (eventCmd) laneCommand()       {}
func (finishCmd) laneCommand()      {}
func (cancelCmd) laneCommand()      {}
func (goneCmd) laneCommand()        {}
func (replacedCmd) laneCommand()    {}
func (unreserveCmd) laneCommand()   {}
func (failCmd) laneCommand()        {}
func (expireCmd) laneCommand()      {}
func (orphanCmd) laneCommand()      {}
func (reattachCmd) laneCommand()    {}
func (storedEndCmd) laneCommand()   {}
func (keptCmd) laneCommand()        {}
