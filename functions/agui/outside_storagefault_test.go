package agui_test

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A stream on the live feed goes on while its door cannot read
// PostgreSQL (its connections are refused; the broker keeps storing):
// every event the broker stored and published is relayed once, in order,
// up to RUN_FINISHED, and the stream ends — rather than stall on the
// record until the door's storage is back (design.md D9, §Doors under
// storage faults). The door's periodic read of the record fails first
// (the barrier: its log says so), so the feed alone can carry the rest.
func TestOutsideStreamGoesOnFromTheFeedWhileStorageIsAway(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	logs := &syncbuf.Buffer{}
	srv := startDoor(t, h, func(o *agui.Options) {
		o.Log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		o.DBCheck = 100 * time.Millisecond
	})
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	for _, want := range []string{"1", "2"} {
		if fr, ok := s.nextEvent(); !ok || fr.ID != want {
			t.Fatalf("event %+v, want id %s", fr, want)
		}
	}

	endOutage := h.Outage(nodetest.DoorApp)
	h.Eventually("the door's read of the record fails", func() bool {
		return strings.Contains(logs.String(), "tail: reading stored events failed")
	})
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"while away"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	h.WaitStatus(f.RunID, run.Completed)
	fs := s.rest()
	endOutage()
	if got := idsOf(fs); !slices.Equal(got, []string{"3", "4", "5"}) {
		t.Fatalf("while the door's storage was away the stream relayed ids %v, want 3 4 5", got)
	}
}
