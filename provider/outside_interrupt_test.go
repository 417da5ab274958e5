package provider_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/provider"
)

// aguiDoor serves a real AG-UI door on the harness's stores.
func aguiDoor(t *testing.T, h *nodetest.Harness) *httptest.Server {
	return doorOn(t, h, func(deps *door.Deps) (http.Handler, error) {
		return agui.New(agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret,
			Heartbeat: 15 * time.Second, LiveBlock: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond, DBCheck: time.Second})
	})
}

// doorOn serves the door build makes on a door's connections to the
// harness's stores, closed when the test ends.
func doorOn(t *testing.T, h *nodetest.Harness, build func(*door.Deps) (http.Handler, error)) *httptest.Server {
	t.Helper()
	deps, err := door.Connect(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity},
		door.ConnectOptions{RedisPrefix: h.Prefix, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	hd, err := build(deps)
	if err != nil {
		deps.Close()
		t.Fatal(err)
	}
	srv := httptest.NewServer(hd)
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close(); deps.Close() })
	return srv
}

// post sends an AG-UI request and returns the events of its SSE answer.
func postAGUI(t *testing.T, url, body string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
	var evs []map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		evs = append(evs, ev)
		if ev["type"] == "RUN_FINISHED" || ev["type"] == "RUN_ERROR" {
			break
		}
	}
	return evs
}

// A handler asks its AG-UI caller a question and is called again with the
// answer, as the package doc says: the same Run.ID and ThreadID, an Input
// whose parentRunId is that id and whose resume array carries the answer,
// LastUserText "" when the answer came with no message; the first round's
// caller sees the interrupt, the second round's its own RUN_STARTED.
func TestOutsideInterruptSecondRound(t *testing.T) {
	h := nodetest.Start(t, nil)
	srv := aguiDoor(t, h)
	s := outsideSigner(t, 0x56)
	type round struct {
		id, thread, lastText string
		input                map[string]any
	}
	rounds := make(chan round, 2)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "ask", Handler: func(ctx context.Context, r *provider.Run) error {
		var in map[string]any
		if err := json.Unmarshal(r.Input, &in); err != nil {
			return err
		}
		rounds <- round{r.ID, r.ThreadID, r.LastUserText(), in}
		if err := started(ctx, r); err != nil {
			return err
		}
		if in["resume"] == nil {
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID,
				"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "q1", "reason": "confirm", "message": "Proceed?"}}}})
		}
		if err := r.EmitText(ctx, "m2", "proceeding"); err != nil {
			return err
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	url := srv.URL + "/agui/" + s.PublicKeyHex() + "/ask"

	first := postAGUI(t, url, `{"threadId":"t-caller","runId":"r-1","state":{},"messages":[{"id":"u1","role":"user","content":"delete it"}],"tools":[],"context":[],"forwardedProps":{}}`)
	r1 := <-rounds
	if r1.lastText != "delete it" {
		t.Errorf("first round LastUserText = %q", r1.lastText)
	}
	last := first[len(first)-1]
	if last["type"] != "RUN_FINISHED" || fmt.Sprint(last["outcome"]) == "" || first[0]["runId"] != r1.id {
		t.Fatalf("first round's caller saw %v", first)
	}
	h.WaitStatus(r1.id, run.InputRequired)

	answer := fmt.Sprintf(`{"threadId":%q,"runId":"r-2","state":{},"messages":[],"tools":[],"context":[],"forwardedProps":{},"resume":[{"interruptId":"q1","status":"resolved","payload":{"ok":true}}]}`, r1.thread)
	second := postAGUI(t, url, answer)
	r2 := <-rounds
	if r2.id != r1.id || r2.thread != r1.thread {
		t.Errorf("second round is run %s of thread %s, want %s of %s", r2.id, r2.thread, r1.id, r1.thread)
	}
	if r2.input["parentRunId"] != r1.id {
		t.Errorf("second round's parentRunId = %v, want %s", r2.input["parentRunId"], r1.id)
	}
	if r2.lastText != "" {
		t.Errorf("second round LastUserText = %q, want \"\" (the answer came with no message)", r2.lastText)
	}
	resume, _ := json.Marshal(r2.input["resume"])
	if string(resume) != `[{"interruptId":"q1","payload":{"ok":true},"status":"resolved"}]` {
		t.Errorf("second round's resume = %s", resume)
	}
	if len(second) == 0 || second[0]["type"] != "RUN_STARTED" || second[len(second)-1]["type"] != "RUN_FINISHED" {
		t.Errorf("second round's caller saw %v", second)
	}
	h.WaitStatus(r1.id, run.Completed)
}
