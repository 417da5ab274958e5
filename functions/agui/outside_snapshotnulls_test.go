package agui_test

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// The conversation read back (GET /threads/{id}, README "Calling an
// agent") holds AG-UI messages, and what an AG-UI caller receives parses
// in the official 1.0 client (design.md §The doors): @ag-ui/core's
// MessageSchema refuses null for an optional member. The door lays a
// caller's message out with every key its role's model names, null when
// not sent (core/runinput, for strict providers), and the snapshot handed
// those back: the caller's {"id","role":"user","content":"hi"} came back
// with "name":null,"encryptedValue":null — members it never sent, which
// MessageSchema.safeParse refuses ("expected string, received null"). A
// snapshot message now drops its optional nulls as a relayed
// MESSAGES_SNAPSHOT's do, and keeps every other member.
func TestOutsideSnapshotMessagesParseAsAGUI(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	body := `{"threadId":"new","runId":"r-1","messages":[{"id":"m1","role":"user","content":"hi"},` +
		`{"id":"m2","role":"user","content":"there","metadata":{"k":null},"name":"ann"}],"tools":[],"context":[],"state":null,"forwardedProps":{}}`
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	code, _, snap := jsonCall(t, "GET", srv.URL+"/threads/"+*f.ThreadID, "", nil)
	if code != 200 {
		t.Fatalf("snapshot: %d %v", code, snap)
	}
	msgs, _ := snap["messages"].([]any)
	if len(msgs) < 2 {
		t.Fatalf("snapshot messages: %v", msgs)
	}
	for i, want := range []map[string]any{
		{"role": "user", "content": "hi"},
		{"role": "user", "content": "there", "metadata": map[string]any{"k": nil}, "name": "ann"},
	} {
		m, _ := msgs[i].(map[string]any)
		delete(m, "id") // funduq's own msg_… id
		got, _ := json.Marshal(m)
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) {
			t.Errorf("snapshot message %d: %s; want %s (no optional member null, any other kept)", i, got, exp)
		}
	}
}
