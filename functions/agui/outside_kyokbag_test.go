package agui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// A KYOK declaration that names no LLM offering opts in to nothing, and its
// context — the caller's LLM credentials, meant for the LLM provider alone,
// sealed — would go to the agent's provider and into the database in the
// clear. It is the caller's mistake: 422 invalid_run_input naming
// kyok.llmProvider, nothing written.
func TestOutsideKyokContextWithoutAnOfferingIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	for _, kyok := range []string{
		`{"context":{"apiKey":"sk-caller-secret"}}`,
		`{"context":{"apiKey":"sk-caller-secret"},"llmProvider":null}`,
		`{}`,
	} {
		t.Run(kyok, func(t *testing.T) {
			body := `{"threadId":"t","runId":"r","messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],` +
				`"forwardedProps":{"kyok":` + kyok + `}}`
			resp, cancel := do(t, "POST", aguiURL(srv, p.Key, "echo"), body, nil)
			defer cancel()
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 422 || !strings.HasPrefix(ct, "application/json") {
				t.Fatalf("got %d %s, want 422", resp.StatusCode, ct)
			}
			var got map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if errCode(got) != door.CodeInvalidRunInput || !strings.Contains(mustJSON(got), "llmProvider") {
				t.Fatalf("got %v, want %s naming llmProvider", got, door.CodeInvalidRunInput)
			}
			if n := runCount(t, h); n != 0 {
				t.Fatalf("%d runs written", n)
			}
		})
	}
}
