package agui_test

import (
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// A settled run of more events than one page of the record (500) replays
// from any Last-Event-ID — none, 0, on the page boundary, the last, past
// the last — every later event exactly once, in order.
func TestLongRunReplaysAcrossPages(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t-long", "r-long", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	for i := range 1000 {
		p.Event(f.RunID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"%d "}`, i))
	}
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)
	const total = 1004
	for _, after := range []string{"", "0", "1", "499", "500", "501", "1000", "1003", "1004", "1005", "99999"} {
		var hdr map[string]string
		if after != "" {
			hdr = map[string]string{"Last-Event-ID": after}
		}
		st := openStream(t, "GET", srv.URL+"/runs/"+f.RunID+"/events", "", hdr)
		var ids []string
		fs := st.rest()
		for _, id := range idsOf(fs) {
			if id != "" { // a resumed stream opens with an id-less RUN_STARTED
				ids = append(ids, id)
			}
		}
		from := 0
		if after != "" {
			from, _ = strconv.Atoi(after)
		}
		// Inside m1 (its START is seq 2, its END 1003), the resume
		// reopens it, its opening found across the pages of the run's
		// earlier events (design.md §The doors, "A resume from inside a
		// message").
		var reopen []string
		if from >= 2 && from <= 1002 {
			reopen = []string{"TEXT_MESSAGE_START m1"}
		}
		if got := reopenedBy(t, fs); !slices.Equal(got, reopen) {
			t.Errorf("after %q: reopened %q, want %q", after, got, reopen)
		}
		want := max(total-from, 0)
		if len(ids) != want {
			t.Errorf("after %q: %d events, want %d; first %v", after, len(ids), want, ids[:min(len(ids), 3)])
			continue
		}
		for i, id := range ids {
			if id != strconv.Itoa(from+i+1) {
				t.Errorf("after %q: event %d has id %s, want %d", after, i, id, from+i+1)
				break
			}
		}
	}
}
