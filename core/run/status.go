package run

import (
	"fmt"
	"slices"
)

// Status is a run's stored status. The set is closed: the database's check
// constraint lists exactly these values.
type Status string

const (
	Queued        Status = "queued"         // born here; waiting to be offered
	Offering      Status = "offering"       // an offer is out, the provider has not answered
	Running       Status = "running"        // claimed: a provider accepted it
	Cancelling    Status = "cancelling"     // claimed, and a cancel has been passed on
	InputRequired Status = "input-required" // the stream ended on a question (design.md D1)
	Completed     Status = "completed"
	Failed        Status = "failed"
	Cancelled     Status = "cancelled"
)

// All lists every status in lifecycle order.
var All = []Status{Queued, Offering, Running, Cancelling, InputRequired, Completed, Failed, Cancelled}

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool { return slices.Contains(All, s) }

// Terminal reports whether nothing more can happen to a run in this status.
func (s Status) Terminal() bool { return s == Completed || s == Failed || s == Cancelled }

// Active reports whether a run in this status is still funduq's concern:
// waiting, offered, held by a provider, or paused on a question.
func (s Status) Active() bool { return s.Valid() && !s.Terminal() }

// Writer says who may apply a transition. The broker's writes are fenced by
// its leader epoch; a door's are guarded by status alone.
type Writer int

const (
	ByBroker Writer = iota + 1
	ByDoor
)

func (w Writer) String() string {
	switch w {
	case ByBroker:
		return "broker"
	case ByDoor:
		return "door"
	}
	return fmt.Sprintf("writer(%d)", int(w))
}

// Transition is one legal move: the statuses a run may be in for a write of
// To to apply, and who makes that write.
type Transition struct {
	To     Status
	From   []Status
	Writer Writer
	Why    string
}

// transitions is the status machine (design.md §The status machine).
// A write not listed here is refused and changes nothing.
var transitions = []Transition{
	{To: Offering, From: []Status{Queued}, Writer: ByBroker,
		Why: "the run's lane hands it to a provider; the provider's place is taken"},
	{To: Queued, From: []Status{Offering}, Writer: ByBroker,
		Why: "the offer was declined or went unanswered, or delivery failed"},
	{To: Running, From: []Status{Queued, Offering}, Writer: ByBroker,
		Why: "the provider accepted (from queued: a late ack)"},
	{To: Cancelling, From: []Status{Running}, Writer: ByBroker,
		Why: "a cancel was requested on a claimed run and passed on"},
	{To: InputRequired, From: []Status{Running, Cancelling}, Writer: ByBroker,
		Why: "the stream finished on an interrupt outcome"},
	{To: Completed, From: []Status{Running, Cancelling}, Writer: ByBroker,
		Why: "the stream finished with RUN_FINISHED"},
	{To: Cancelled, From: []Status{Queued, Offering, Running, Cancelling}, Writer: ByBroker,
		Why: "a cancel of an unclaimed run, or a stream that ended after a cancel request"},
	{To: Failed, From: []Status{Queued, Offering, Running, Cancelling}, Writer: ByBroker,
		Why: "any failure reason"},
	{To: Queued, From: []Status{InputRequired}, Writer: ByDoor,
		Why: "an answer reopens the paused run under the same id (D1)"},
}

// Transitions returns a copy of the status machine's table.
func Transitions() []Transition {
	out := make([]Transition, len(transitions))
	for i, t := range transitions {
		t.From = slices.Clone(t.From)
		out[i] = t
	}
	return out
}

// LegalFrom returns the statuses from which writer w may move a run to `to`.
// It returns nil when w may never write `to`.
func LegalFrom(w Writer, to Status) []Status {
	for _, t := range transitions {
		if t.To == to && t.Writer == w {
			return slices.Clone(t.From)
		}
	}
	return nil
}

// Legal reports whether writer w may move a run from `from` to `to`.
func Legal(w Writer, from, to Status) bool {
	return slices.Contains(LegalFrom(w, to), from)
}
