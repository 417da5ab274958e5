package agui_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// A message's role is one AG-UI names and its content, when present and
// not null, has the type that role's content has; anything else is the
// caller's invalid input, named (outside test F4: role "wizard" and a
// user's content 7 were relayed to the provider as sent).
func TestMessageRolesAndContent(t *testing.T) {
	for _, c := range []struct {
		msg string
		ok  bool
	}{
		{`{"id":"m","role":"user","content":"hi"}`, true},
		{`{"id":"m","role":"user","content":[{"type":"text","text":"hi"}]}`, true},
		{`{"id":"m","role":"assistant","content":null,"toolCalls":[]}`, true},
		{`{"id":"m","role":"assistant"}`, true},
		{`{"id":"m","role":"developer","content":"be brief"}`, true},
		{`{"id":"m","role":"activity","activityType":"plan","content":{"steps":[]}}`, true},
		{`{"id":"m","role":"reasoning","content":"because"}`, true},
		{`{"id":"m","role":"tool","toolCallId":"tc","content":"42"}`, true},
		{`{"id":"m","role":"wizard","content":"hi"}`, false},
		{`{"id":"m","role":"user","content":7}`, false},
		{`{"id":"m","role":"system","content":["x"]}`, false},
		{`{"id":"m","role":"activity","activityType":"plan","content":"x"}`, false},
	} {
		body := fmt.Sprintf(`{"threadId":"t","runId":"r","messages":[%s],"tools":[],"context":[]}`, c.msg)
		_, err := agui.ParseRunAgentInput([]byte(body))
		var de *door.Error
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: refused: %v", c.msg, err)
		case !c.ok && (!errors.As(err, &de) || de.Code != door.CodeInvalidRunInput):
			t.Errorf("%s: got %v, want %s", c.msg, err, door.CodeInvalidRunInput)
		}
	}
}
