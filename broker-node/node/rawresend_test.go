package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// A provider that reconnects and serializes what it sent again — a
// restarted process, another JSON writer — writes the same events with
// their members in another order, other whitespace, a string's characters
// escaped and a number spelled otherwise. Each is a resend (design.md D7,
// "A resend is the same JSON value"): taken silently, held once by the
// record and by the caller's stream. An event differing in one value under
// a stored seq — an integer past 2^53, where a float64 reading would see
// the same number — is still another event: refused naming the run, not
// stored. The same holds within one link's round, where the repeat may
// ride in the batch of the event it repeats.
func TestRawResendWrittenDifferentlyIsTakenOnce(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = time.Hour })
	p := rawDial(t, h, 0x7b, nil)
	p.register("echo")
	id, thread := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	frame := func(seq int, ev string) string {
		return fmt.Sprintf(`{"type":"event","runId":%q,"seq":%d,"event":%s}`, id, seq, ev)
	}
	p.text(frame(1, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)))
	p.text(frame(2, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`))
	custom := `{"type":"CUSTOM","name":"note","value":{"n":1,"s":"A","big":9007199254740993,"list":[1,"x",null,true]}}`
	p.text(frame(3, custom))
	if got := p.barrier("sent"); len(got) != 0 {
		t.Fatalf("answered %v", got)
	}
	_ = p.ws.Close() // lost: no close frame
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })

	p2 := rawDial(t, h, 0x7b, nil)
	p2.register("echo")
	p2.text(frame(1, fmt.Sprintf("{ \"runId\" : %q,\n\t\"threadId\":%q, \"type\":\"RUN_STARTED\" }", id, thread)))
	p2.text(frame(2, `{"role":"assistant","messageId":"m1","type":"TEXT_MESSAGE_START"}`))
	p2.text(frame(3, `{"value":{"list":[ 1.0, "\u0078", null, true ],"big":9007199254740993,"s":"\u0041","n":10e-1},"name":"note","type":"CUSTOM"}`))
	// One value differs, beyond float64's exact integers: another event.
	p2.text(frame(3, `{"value":{"list":[1,"x",null,true],"big":9007199254740992,"s":"A","n":1},"name":"note","type":"CUSTOM"}`))
	var e struct{ Message, RunID string }
	p2.expect(wire.TypeError, &e)
	if e.RunID != id || !strings.Contains(e.Message, "seq is already taken") {
		t.Errorf("another event under a stored seq answered %+v", e)
	}
	p2.text(frame(4, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`))
	p2.text(frame(4, `{"delta":"hello","messageId":"m1","type":"TEXT_MESSAGE_CONTENT"}`)) // within the round
	p2.text(frame(5, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`))
	p2.text(frame(6, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id)))
	p2.text(fmt.Sprintf(`{"type":"finish","runId":%q}`, id))
	h.WaitStatus(id, run.Completed)
	// The run's end is written after every refusal of its events: nothing
	// else was refused.
	if got := p2.barrier("end"); len(got) != 0 {
		t.Errorf("the resends were answered %v", got)
	}

	want := "RUN_STARTED TEXT_MESSAGE_START CUSTOM TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END RUN_FINISHED"
	var stored []string
	for _, ev := range h.Events(id) {
		stored = append(stored, fmt.Sprint(ev["type"]))
	}
	if strings.Join(stored, " ") != want {
		t.Errorf("the record holds %v, want %s", stored, want)
	}
	if evs, err := h.Store.EventsAfter(context.Background(), id, 0, 100); err != nil || len(evs) < 3 || string(evs[2].Event) != custom {
		t.Errorf("the record's CUSTOM is not the one first sent, %s: %+v %v", custom, evs, err)
	}

	// The caller's live stream (the Redis feed a door tails, D9).
	opt, err := redis.ParseURL(h.Cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	entries, err := livefeed.New(rdb, h.Prefix).Read(context.Background(), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var streamed []string
	for _, en := range entries {
		if en.End != "" {
			continue
		}
		var ev struct{ Type string }
		_ = json.Unmarshal(en.Event, &ev)
		streamed = append(streamed, ev.Type)
	}
	if strings.Join(streamed, " ") != want {
		t.Errorf("the caller's stream holds %v, want %s", streamed, want)
	}
	h.Settle()
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}
