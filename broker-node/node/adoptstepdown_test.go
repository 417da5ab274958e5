package node_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// A leader that steps down while it re-adopts a run (its adopt write
// waiting on PostgreSQL) tells the provider nothing about that run: the
// run has not ended, and the provider carries on with whoever leads next.
// An error frame naming the run would make our SDK stop the handler
// (ErrRunNotHeld), and the run would fail after the grace although its
// provider was still running it.
func TestStepDownDuringReAdoptionRefusesNothing(t *testing.T) {
	// Our SDK re-adopts with the ack it resends first; a raw provider may
	// re-adopt with its next event.
	t.Run("ack", func(t *testing.T) {
		stepDownDuringReAdoption(t, 0xf4, func(p *nodetest.Prov, id string) {
			p.Send(wire.Ack{Type: wire.TypeAck, RunID: id, Accepted: &accepted})
		})
	})
	t.Run("event", func(t *testing.T) {
		stepDownDuringReAdoption(t, 0xf5, func(p *nodetest.Prov, id string) {
			p.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
		})
	})
}

var accepted = true

func stepDownDuringReAdoption(t *testing.T, seed byte, report func(p *nodetest.Prov, id string)) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(seed, nil)
	p.Register("echo")
	id, thread := a.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	a.Eventually("first event stored", func() bool { return len(a.Events(id)) == 1 })
	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)

	p2 := b.Connect(seed, nil)
	p2.Register("echo")
	b.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
	report(p2, id) // re-adopts it
	b.Eventually("the adopt write waits on the row lock", b.LockWaits)
	b.Shutdown()
	for _, f := range p2.Rest() {
		var e wire.Error
		if json.Unmarshal(f, &e) == nil && e.Type == wire.TypeError && e.RunID == id {
			t.Errorf("refused at the step-down: %s", f)
		}
	}
}
