package agui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

// A door reads stored events partly into Go structs, whose field matching
// ignores case, so an event carrying a member named like one of its
// type's fields but not exactly could be read by a door as something
// other than what the broker validated: {"type":"TEXT_MESSAGE_CONTENT",
// …,"TYPE":"RUN_ERROR"} stored as text and streamed as a run's error.
// Such an event is malformed (design.md §The provider wire, "Exact
// names"); a member of the event's own, of any other name, is not.
func TestMemberDifferingFromAFieldOnlyInCaseIsMalformed(t *testing.T) {
	for _, in := range []string{
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","TYPE":"RUN_ERROR"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","Delta":"other"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","MessageID":"m2"}`,
		`{"type":"RUN_ERROR","message":"boom","Code":"x"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","Outcome":{"type":"interrupt","interrupts":[{"id":"q"}]}}`,
		`{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"f","Timestamp":1}`,
		`{"type":"FUTURE_EVENT","Type":"RUN_ERROR"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","Interrupts":[],"interrupts":[{"id":"q","reason":"r"}]}}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"q","ID":"p","reason":"r"}]}}`,
	} {
		mustMalformed(t, json.RawMessage(in))
		if _, err := agui.Validate(json.RawMessage(in)); err == nil || !strings.Contains(err.Error(), "only in case") {
			t.Errorf("Validate(%s): %v, want it to say the member differs only in case", in, err)
		}
	}
	for _, in := range []string{
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hi","deltaExtra":"x","myType":"y"}`,
		`{"type":"FUTURE_EVENT","Anything":1}`,
	} {
		mustValid(t, json.RawMessage(in))
	}
}
