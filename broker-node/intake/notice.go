package intake

import (
	"context"
	"strconv"

	"github.com/funduq/funduq-go/core/store"
)

// Kind says which channel a notification came on.
type Kind int

// The kinds, one per channel in store.Channels. The zero Kind is none of them.
const (
	Queued  Kind = iota + 1 // store.ChannelRunQueued: a new run was inserted queued
	Cancel                  // store.ChannelRunCancel: a cancel was requested
	Resumed                 // store.ChannelRunResumed: a paused run was reopened
)

// String returns "queued", "cancel" or "resumed".
func (k Kind) String() string {
	switch k {
	case Queued:
		return "queued"
	case Cancel:
		return "cancel"
	case Resumed:
		return "resumed"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Channel returns the NOTIFY channel of k, or "" for an unknown Kind.
func (k Kind) Channel() string {
	switch k {
	case Queued:
		return store.ChannelRunQueued
	case Cancel:
		return store.ChannelRunCancel
	case Resumed:
		return store.ChannelRunResumed
	}
	return ""
}

// KindOf maps a NOTIFY channel to its Kind; ok is false for any other channel.
func KindOf(channel string) (k Kind, ok bool) {
	switch channel {
	case store.ChannelRunQueued:
		return Queued, true
	case store.ChannelRunCancel:
		return Cancel, true
	case store.ChannelRunResumed:
		return Resumed, true
	}
	return 0, false
}

// Notice is one notification: which channel, and the run id it carried.
// A queued notice may carry the run as the door queued it
// (store.QueuedPayload), so the handler need not read it back; Run is nil
// otherwise.
type Notice struct {
	Kind  Kind
	RunID string
	Run   *store.Run
}

// Handler receives what the Listener learns. Its methods are called on the
// goroutine running Listener.Run, one call at a time, and a slow call delays
// everything after it (notifications are buffered meanwhile, not lost).
//
// Notify is called for each notification, in arrival order. It is a hint: the
// same run may also be found by a catch-up, before or after its Notify, and a
// notification sent while the Listener was disconnected never arrives.
//
// CatchUp says when to look at the table for work that was missed. reason is
// "connect" after the first connection of Run, "reconnect" after every later
// one — both called once the LISTENs are active, before any notification of
// that connection is delivered — or "poll" for the periodic safety poll. The
// Handler runs the query itself; a failed catch-up is the Handler's to log,
// the next poll tries again.
type Handler interface {
	Notify(ctx context.Context, n Notice)
	CatchUp(ctx context.Context, reason string)
}

// Catch-up reasons passed to Handler.CatchUp.
const (
	ReasonConnect   = "connect"
	ReasonReconnect = "reconnect"
	ReasonPoll      = "poll"
)
