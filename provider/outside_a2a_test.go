package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/provider"
)

// a2aDoor serves a real A2A door on the harness's stores.
func a2aDoor(t *testing.T, h *nodetest.Harness) *httptest.Server {
	return doorOn(t, h, func(deps *door.Deps) (http.Handler, error) {
		return a2a.New(a2a.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret,
			Tail: door.TailOptions{Heartbeat: 15 * time.Second, LiveBlock: 500 * time.Millisecond,
				PollInterval: 50 * time.Millisecond, DBCheck: time.Second}})
	})
}

func a2aCall(t *testing.T, url, body string) map[string]any {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return out
}

// The A2A form of the second round: a task paused on a question
// (input-required) is answered with a message naming it, and the handler
// is called again with the same Run.ID, parentRunId that id and the
// answer as LastUserText, as the package doc says.
func TestOutsideInterruptSecondRoundOverA2A(t *testing.T) {
	h := nodetest.Start(t, nil)
	srv := a2aDoor(t, h)
	s := outsideSigner(t, 0x4a)
	type round struct{ id, thread, text, parent string }
	rounds := make(chan round, 2)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "ask", Handler: func(ctx context.Context, r *provider.Run) error {
		var in struct {
			ParentRunID string `json:"parentRunId"`
		}
		_ = json.Unmarshal(r.Input, &in)
		rounds <- round{r.ID, r.ThreadID, r.LastUserText(), in.ParentRunID}
		if err := started(ctx, r); err != nil {
			return err
		}
		if in.ParentRunID == "" {
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID,
				"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "q1", "reason": "confirm", "message": "Proceed?"}}}})
		}
		if err := r.EmitText(ctx, "m2", "ok: "+r.LastUserText()); err != nil {
			return err
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	url := srv.URL + "/a2a/" + s.PublicKeyHex() + "/ask"
	first := a2aCall(t, url, `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"text","text":"delete it"}]}}}`)
	r1 := <-rounds
	h.WaitStatus(r1.id, run.InputRequired)
	task, _ := first["result"].(map[string]any)
	if task == nil || task["id"] != r1.id {
		t.Fatalf("first answer %v", first)
	}
	second := a2aCall(t, url, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"message/send","params":{"message":{"kind":"message","messageId":"m-2","role":"user","taskId":%q,"contextId":%q,"parts":[{"kind":"text","text":"yes, go"}]}}}`, r1.id, r1.thread))
	r2 := <-rounds
	if r2.id != r1.id || r2.thread != r1.thread || r2.parent != r1.id {
		t.Errorf("second round %+v, first %+v", r2, r1)
	}
	if r2.text != "yes, go" {
		t.Errorf("second round LastUserText = %q, want the answer", r2.text)
	}
	h.WaitStatus(r1.id, run.Completed)
	if second["error"] != nil {
		t.Errorf("second answer %v", second)
	}
}
