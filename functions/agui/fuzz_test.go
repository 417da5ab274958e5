package agui_test

import (
	"errors"
	"testing"

	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// FuzzParseRunAgentInput: the parser never panics, refuses only with a
// 400/422 envelope error, and whatever it accepts the one builder builds.
func FuzzParseRunAgentInput(f *testing.F) {
	for _, s := range []string{
		input("t", "r", ""),
		answerBody("thread_x", "r"),
		kyokBody("k", "n"),
		withChain([]string{"a.b.c"}),
		`{"threadId":"t","runId":"r","messages":[{"role":"tool","toolCallId":"x","content":null}],"state":null,"resume":null}`,
		`{"threadId":"t","runId":"r","forwardedProps":[1,{"funduq":2}],"tools":[{}],"context":[{"value":"v"}]}`,
		`{"threadId":"t","runId":"r","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"parentRunId":"p"}`,
		`{"threadId":"\u0000","runId":"r","messages":[{"role":"x"}]}`,
		`{"threadId":"t","runId":"r","forwardedProps":{"a":"\ud800"}}`,
		`{"threadId":"t"`, `[]`, `null`, `"x"`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := agui.ParseRunAgentInput(body)
		if err != nil {
			var de *door.Error
			if !errors.As(err, &de) || (de.Status != 400 && de.Status != 422) {
				t.Fatalf("refusal %v is not a 400/422 door error", err)
			}
			return
		}
		_, err = runinput.Build(runinput.Request{ThreadID: "thread_x", RunID: "run_x", ParentRunID: in.ParentRunID,
			State: in.State, Messages: in.Messages, Tools: in.Tools, Context: in.Context,
			ForwardedProps: in.ForwardedProps, Resume: in.Resume})
		if err != nil {
			t.Fatalf("accepted input does not build: %v\n%s", err, body)
		}
	})
}
