package node_test

import (
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// Chaos seed 17: a broker frozen (SIGSTOP) or starved past an offer's
// deliver_timeout reads the lapse before the provider's answer, sent in
// time, that waits on the link: it counted unanswered and then
// answered_late against a provider that did nothing wrong. A lapse that
// fires well after its deadline in real time is put off a moment for the
// link's reader to catch up. Here the broker's lapse comes late (its clock
// is advanced only after more real time than the timeout has passed) and
// the answer right behind it: the run is claimed and nothing is counted.
func TestLateLapseWaitsForAnAnswerAlreadySent(t *testing.T) {
	const timeout = 100 * time.Millisecond
	h := nodetest.Start(t, func(c *configBroker) { c.DeliverTimeout = timeout })
	p := h.Connect(0xec, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	// The broker "ran late": the real time since the offer is past the
	// timeout and the slack before its own clock says the timeout passed.
	time.Sleep(timeout + 400*time.Millisecond)
	h.Advance(timeout)
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p.Key); q.Unanswered+q.AnsweredLate != 0 {
		t.Fatalf("counted %+v against a provider that answered", q)
	}
}
