package a2a

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
)

// A fold of a run's events split anywhere — the record's pages before a
// tail's start, then what the tail relayed (then) — is the fold of all of
// them at once: the same artifacts, the same last error and the same
// open asks over the last round, for runs of one, two and three rounds.
func TestFoldThenIsOneFold(t *testing.T) {
	call := func(id string) string {
		return fmt.Sprintf(`{"type":"TOOL_CALL_START","toolCallId":%q,"toolCallName":"ask"}`, id)
	}
	text := func(id, d string) string {
		return fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":%q}`, id, d)
	}
	finished := `{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i1"}]}}`
	runs := map[string][]string{
		"one round": {`{"type":"RUN_STARTED"}`, text("a", "he"), call("c1"), text("a", "llo"), finished},
		"two rounds": {`{"type":"RUN_STARTED"}`, call("c1"), text("a", "x"), finished,
			`{"type":"RUN_STARTED"}`, call("c2"), text("b", "y"), `{"type":"RUN_ERROR","message":"m","code":"e1"}`, finished},
		"three rounds": {call("c1"), finished, call("c2"), text("a", "1"), finished, `{"type":"RUN_ERROR","message":"only"}`,
			call("c3"), text("a", "2"), finished},
	}
	paused := store.Run{RunID: "r", ThreadID: "t", Status: run.InputRequired}
	for name, evs := range runs {
		whole := newFold(-1, true)
		for i, e := range evs {
			whole.add(i+1, json.RawMessage(e))
		}
		want := whole.view(paused, nil)
		for cut := 0; cut <= len(evs); cut++ {
			f, g := newFold(-1, true), newFold(-1, true)
			for i, e := range evs {
				if i < cut {
					f.add(i+1, json.RawMessage(e))
				} else {
					g.add(i+1, json.RawMessage(e))
				}
			}
			f.then(g)
			if got := f.view(paused, nil); !reflect.DeepEqual(got, want) || f.lastErr != whole.lastErr || f.last != whole.last {
				t.Errorf("%s cut at %d:\n got %+v (error %q)\nwant %+v (error %q)", name, cut, got, f.lastErr, want, whole.lastErr)
			}
		}
	}
}
