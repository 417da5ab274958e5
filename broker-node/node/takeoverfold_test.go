package node_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A run held at a takeover whose provider resends its round — the events
// the old leader stored, with their seqs, then the rest and the finish —
// ends with the agent's reply on its thread once. The new leader read the
// stored events back; a resend of them rides in the same batch as the
// finish, and the store skips it, so the reply folded for the thread must
// skip it too (failover chaos around an interrupt, seed 2: the thread held
// "sdk-0 sdk-1 sdk-2 sdk-0 sdk-1 sdk-2", the record each event once).
// Paused or completed, the round's reply is the same.
func TestTakeoverResendWithTheFinishFoldsTheReplyOnce(t *testing.T) {
	for _, paused := range []bool{false, true} {
		t.Run(map[bool]string{false: "completed", true: "paused"}[paused], func(t *testing.T) {
			takeoverResendFolds(t, paused)
		})
	}
}

func takeoverResendFolds(t *testing.T, paused bool) {
	a := nodetest.Start(t, func(c *configBroker) { c.ProviderGrace = 30 * time.Second })
	b := a.Peer("node-b")
	p := a.Connect(0xf6, nil)
	p.Register("echo")
	id, thread := a.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	finished := fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id)
	if paused {
		finished = fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"q1","reason":"confirm"}]}}`, thread, id)
	}
	round := []string{
		fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"one "}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"two"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		finished,
	}
	send := func(p *nodetest.Prov, i int) {
		seq := int64(i + 1)
		p.Send(wire.Event{Type: wire.TypeEvent, RunID: id, Event: json.RawMessage(round[i]), ProviderSeq: &seq})
	}
	for i := range 3 {
		send(p, i)
	}
	a.Eventually("three events stored", func() bool { return len(a.Events(id)) == 3 })
	a.Shutdown()
	b.Eventually("the standby leads", b.Ready)

	// The provider is back and resends the whole round, then the finish:
	// the lane is held on the re-adoption's write meanwhile, so what
	// follows the first report reaches it as one batch with the finish.
	p2 := b.Connect(0xf6, nil)
	p2.Register("echo")
	release := b.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
	for i := range round {
		send(p2, i)
	}
	p2.Finish(id)
	b.Eventually("the adopt write waits on the row lock", b.LockWaits)
	p2.ReadBarrier() // every frame is in the lane's queue
	release()
	want := run.Completed
	if paused {
		want = run.InputRequired
	}
	b.WaitStatus(id, want)

	if got := len(b.Events(id)); got != len(round) {
		t.Errorf("%d events stored, want %d", got, len(round))
	}
	msgs, err := b.Store.ThreadMessages(t.Context(), thread, 100)
	if err != nil {
		t.Fatal(err)
	}
	var replies []string
	for _, m := range msgs {
		var v struct{ Role, Content string }
		_ = json.Unmarshal(m, &v)
		if v.Role == "assistant" {
			replies = append(replies, v.Content)
		}
	}
	if strings.Join(replies, "|") != "one two" {
		t.Errorf("the thread holds the agent's replies %q, want one: %q", replies, "one two")
	}
}

// The same within one leadership: a provider whose link dropped resends
// its round on its next link, the resend riding in one batch with the
// finish.
func TestRelinkResendWithTheFinishFoldsTheReplyOnce(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = 5 * time.Second })
	p := h.Connect(0xf7, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	round := []string{
		fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"one "}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"two"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id),
	}
	send := func(p *nodetest.Prov, i int) {
		seq := int64(i + 1)
		p.Send(wire.Event{Type: wire.TypeEvent, RunID: id, Event: json.RawMessage(round[i]), ProviderSeq: &seq})
	}
	for i := range 3 {
		send(p, i)
	}
	h.Eventually("three events stored", func() bool { return len(h.Events(id)) == 3 })
	p.Close()
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	back := h.Connect(0xf7, nil)
	back.Register("echo")
	release := h.Hold(`SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE`, id)
	for i := range round {
		send(back, i)
	}
	back.Finish(id)
	h.Eventually("a write waits on the row lock", h.LockWaits)
	back.ReadBarrier()
	release()
	h.WaitStatus(id, run.Completed)
	if got := len(h.Events(id)); got != len(round) {
		t.Errorf("%d events stored, want %d", got, len(round))
	}
	msgs, err := h.Store.ThreadMessages(t.Context(), thread, 100)
	if err != nil {
		t.Fatal(err)
	}
	var replies []string
	for _, m := range msgs {
		var v struct{ Role, Content string }
		_ = json.Unmarshal(m, &v)
		if v.Role == "assistant" {
			replies = append(replies, v.Content)
		}
	}
	if strings.Join(replies, "|") != "one two" {
		t.Errorf("the thread holds the agent's replies %q, want one: %q", replies, "one two")
	}
}
