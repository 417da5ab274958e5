package agui_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// GET /runs/{runId}/events with ?after= given twice names two positions;
// the door cannot know which the client meant, and refuses it 400
// bad_request naming after, as a repeated ?limit=, ?before= or GET /agents
// ?after= is (design.md §The doors), before the run is read: the same
// answer for a run that exists and one that does not. On main the first
// was taken silently and the run streamed from there.
func TestOutsideRunEventsAfterGivenTwiceIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("new", "r-1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	var answers []map[string]any
	for _, id := range []string{f.RunID, "run_000000000000000000000000"} {
		code, _, body := jsonCall(t, "GET", srv.URL+"/runs/"+id+"/events?after=1&after=3", "", nil)
		if code != 400 || errCode(body) != door.CodeBadRequest {
			t.Fatalf("run %s, after given twice: %d %v; want 400 %s", id, code, body, door.CodeBadRequest)
		}
		answers = append(answers, body)
	}
	msg := func(body map[string]any) any { e, _ := body["error"].(map[string]any); return e["message"] }
	if msg(answers[0]) != msg(answers[1]) {
		t.Fatalf("a run that exists and one that does not are told apart: %v / %v", answers[0], answers[1])
	}
}
