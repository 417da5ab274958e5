package broker

import "github.com/funduq/funduq-go/core/store"

// storedResend reports whether c repeats an event this lane stored this
// round: the same JSON value under the same provider seq (design.md D7, a
// resend is stored once and taken). Reached after the run's terminal
// event — a second process's resend kept for its register and taken once
// the run passed to it — it is taken as the resend it is, not refused "the
// run already reported its end" for what the caller has. A round read back
// at a takeover has no seqs here, and its resends are refused as before.
func (l *lane) storedResend(c eventCmd) bool {
	if c.bad != nil || c.pseq == nil {
		return false
	}
	i, ok := l.eventAt[*c.pseq]
	return ok && i < len(l.events) && store.SameEvent(l.events[i], c.ev)
}
