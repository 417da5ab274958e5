package a2a_test

// Outside tests of the A2A door: what a new application developer, and a
// stranger, see at the door when the provider behind it speaks the raw wire
// in unusual but valid AG-UI orders, when two callers share an agent, when
// requests are retried, and when the JSON-RPC itself is malformed. Every
// check is an answer a caller gets (a JSON-RPC result or error, a task's
// state, stream items); waits are barriers bounded by guard.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
)

// seatHeader stands in for the API Gateway authorizer in these tests: the
// door's AuthorizedKey reads the caller's key from it.
const seatHeader = "X-Outside-Seat"

func seatDoor(t *testing.T, h *nodetest.Harness) *httptest.Server {
	return startDoor(t, h, func(o *a2a.Options) {
		o.AuthorizedKey = func(r *http.Request) string { return r.Header.Get(seatHeader) }
	})
}

// eventually polls cond until it holds, failing t after guard.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// normID is a JSON value re-encoded (numbers kept exact), to compare ids.
func normID(raw []byte) string {
	d := json.NewDecoder(strings.NewReader(string(raw)))
	d.UseNumber()
	var v any
	if d.Decode(&v) != nil {
		return "invalid:" + string(raw)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// wireState is a v0.3 state name in version v.
func wireState(v, s string) string {
	if v != "1.0" {
		return s
	}
	return "TASK_STATE_" + strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
}

// methodOf is a v0.3 method's name in version v.
func methodOf(v, m string) string {
	if v != "1.0" {
		return m
	}
	return map[string]string{"message/send": "SendMessage", "message/stream": "SendStreamingMessage",
		"tasks/get": "GetTask", "tasks/cancel": "CancelTask", "tasks/resubscribe": "SubscribeToTask"}[m]
}

// item is a stream item in either version: its v0.3 kind and its object.
type item struct {
	kind string
	obj  map[string]any
	id   string
}

func normItems(t *testing.T, v string, its []sseItem) []item {
	t.Helper()
	var out []item
	for _, it := range its {
		if it.Resp.Error != nil {
			t.Fatalf("stream item is an error: %+v", it.Resp.Error)
		}
		r := it.Resp.Result
		if v != "1.0" {
			k, _ := r["kind"].(string)
			out = append(out, item{k, r, it.ID})
			continue
		}
		found := false
		for k, name := range map[string]string{"task": "task", "statusUpdate": "status-update", "artifactUpdate": "artifact-update", "message": "message"} {
			if o, ok := r[k].(map[string]any); ok {
				out = append(out, item{name, o, it.ID})
				found = true
			}
		}
		if !found || len(r) != 1 {
			t.Fatalf("v1.0 stream item is not one wrapped object: %v", r)
		}
	}
	return out
}

// taskResult unwraps a send's result.
func taskResult(t *testing.T, v string, r rpcResp) map[string]any {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("send: error %d %s", r.Error.Code, r.Error.Message)
	}
	if v == "1.0" {
		task, _ := r.Result["task"].(map[string]any)
		if task == nil {
			t.Fatalf("SendMessage result without task: %v", r.Result)
		}
		return task
	}
	return r.Result
}

// artifactsOf maps a task's artifacts by id to their text.
func artifactsOf(task map[string]any) map[string]string {
	out := map[string]string{}
	arts, _ := task["artifacts"].([]any)
	for _, a := range arts {
		am, _ := a.(map[string]any)
		id, _ := am["artifactId"].(string)
		parts, _ := am["parts"].([]any)
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			s, _ := pm["text"].(string)
			out[id] += s
		}
	}
	return out
}

// historyTexts is a task's history as "role:text" strings, roles in v0.3
// words.
func historyTexts(task map[string]any) []string {
	var out []string
	hist, _ := task["history"].([]any)
	for _, m := range hist {
		mm, _ := m.(map[string]any)
		role, _ := mm["role"].(string)
		role = strings.ToLower(strings.TrimPrefix(role, "ROLE_"))
		text := ""
		parts, _ := mm["parts"].([]any)
		for _, p := range parts {
			pm, _ := p.(map[string]any)
			s, _ := pm["text"].(string)
			text += s
		}
		out = append(out, role+":"+text)
	}
	return out
}

func metaOf(obj map[string]any) map[string]any {
	m, _ := obj["metadata"].(map[string]any)
	return m
}

func statusText(obj map[string]any) string {
	st, _ := obj["status"].(map[string]any)
	msg, _ := st["message"].(map[string]any)
	var s string
	parts, _ := msg["parts"].([]any)
	for _, p := range parts {
		pm, _ := p.(map[string]any)
		t, _ := pm["text"].(string)
		s += t
	}
	return s
}

func sameJSON(a, b any) bool {
	var x, y any
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	_ = json.Unmarshal(ja, &x)
	_ = json.Unmarshal(jb, &y)
	return reflect.DeepEqual(x, y)
}

// playNext answers the provider's next offer with script's events, then
// finishes; the frame is sent on the channel once all is sent.
func playNext(p *nodetest.Prov, script func(runID, threadID string) []string) <-chan wire.RunFrame {
	got := make(chan wire.RunFrame, 1)
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		for _, ev := range script(f.RunID, *f.ThreadID) {
			p.Event(f.RunID, ev)
		}
		p.Finish(f.RunID)
		got <- f
	}()
	return got
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("gave up waiting: %s", what)
	}
	var zero T
	return zero
}

// oddCase is a provider script in an unusual but valid AG-UI order and
// what a caller must see of it.
type oddCase struct {
	name      string
	script    func(runID, threadID string) []string
	state     string            // the settled state, v0.3 name
	artifacts map[string]string // artifactId → text
	history   []string          // the task's history, "role:text"
	check     func(t *testing.T, v string, streamed []item, task map[string]any)
}

const futureEvent = `{"type":"FUTURE_THING_V9","payload":{"nested":[1,"two",{"three":null}]},"timestamp":1}`

func oddCases() []oddCase {
	return []oddCase{
		{name: "text chunks without start or end, two messages",
			script: func(r, th string) []string {
				return []string{runStarted(th, r),
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"c1","role":"assistant","delta":"Hel"}`,
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"c1","delta":"lo"}`,
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"c2","delta":"World"}`,
					runFinished(th, r)}
			},
			state: "completed", artifacts: map[string]string{"c1": "Hello", "c2": "World"},
			history: []string{"user:hi", "agent:Hello", "agent:World"}},
		{name: "two text messages interleaved",
			script: func(r, th string) []string {
				return []string{runStarted(th, r),
					`{"type":"TEXT_MESSAGE_START","messageId":"a","role":"assistant"}`,
					`{"type":"TEXT_MESSAGE_START","messageId":"b","role":"assistant"}`,
					`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"one "}`,
					`{"type":"TEXT_MESSAGE_CONTENT","messageId":"b","delta":"two "}`,
					`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"1"}`,
					`{"type":"TEXT_MESSAGE_CONTENT","messageId":"b","delta":"2"}`,
					`{"type":"TEXT_MESSAGE_END","messageId":"b"}`,
					`{"type":"TEXT_MESSAGE_END","messageId":"a"}`,
					runFinished(th, r)}
			},
			state: "completed", artifacts: map[string]string{"a": "one 1", "b": "two 2"},
			history: []string{"user:hi", "agent:one 1", "agent:two 2"}},
		{name: "RUN_STARTED and RUN_FINISHED naming the provider's own ids",
			script: func(r, th string) []string {
				return []string{runStarted("their-thread", "their-run"),
					`{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}`,
					`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"mine"}`,
					`{"type":"TEXT_MESSAGE_END","messageId":"m"}`,
					runFinished("their-thread", "their-run")}
			},
			state: "completed", artifacts: map[string]string{"m": "mine"},
			history: []string{"user:hi", "agent:mine"}},
		{name: "an unknown future event type",
			script: func(r, th string) []string {
				return []string{runStarted(th, r), futureEvent,
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"after"}`,
					runFinished(th, r)}
			},
			state: "completed", artifacts: map[string]string{"m": "after"},
			history: []string{"user:hi", "agent:after"},
			check: func(t *testing.T, v string, streamed []item, task map[string]any) {
				if streamed == nil {
					return
				}
				n := 0
				for _, it := range streamed {
					if ev, ok := metaOf(it.obj)[a2a.AGUIEventKey]; ok && sameJSON(ev, json.RawMessage(futureEvent)) {
						n++
						if it.kind != "status-update" || stateOf(it.obj) != wireState(v, "working") {
							t.Errorf("the unknown event rode on %s %v", it.kind, it.obj)
						}
					}
				}
				if n != 1 {
					t.Errorf("the unknown event reached the stream %d times, want once whole", n)
				}
			}},
		{name: "tool calls with a result, then text",
			script: func(r, th string) []string {
				return []string{runStarted(th, r),
					`{"type":"TOOL_CALL_START","toolCallId":"tc1","toolCallName":"lookup"}`,
					`{"type":"TOOL_CALL_ARGS","toolCallId":"tc1","delta":"{\"q\":"}`,
					`{"type":"TOOL_CALL_ARGS","toolCallId":"tc1","delta":"\"x\"}"}`,
					`{"type":"TOOL_CALL_END","toolCallId":"tc1"}`,
					`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"tc1","content":"42"}`,
					`{"type":"TEXT_MESSAGE_START","messageId":"t","role":"assistant"}`,
					`{"type":"TEXT_MESSAGE_CONTENT","messageId":"t","delta":"it is 42"}`,
					`{"type":"TEXT_MESSAGE_END","messageId":"t"}`,
					runFinished(th, r)}
			},
			state: "completed", artifacts: map[string]string{"t": "it is 42"},
			check: func(t *testing.T, v string, streamed []item, task map[string]any) {
				if streamed == nil {
					h := historyTexts(task)
					if len(h) == 0 || h[0] != "user:hi" || h[len(h)-1] != "agent:it is 42" {
						t.Errorf("history %q", h)
					}
					for _, m := range h {
						if !strings.HasPrefix(m, "user:") && !strings.HasPrefix(m, "agent:") {
							t.Errorf("history has a message that is neither user's nor agent's: %q", h)
						}
					}
					return
				}
				var tools []string
				for _, it := range streamed {
					if ev, ok := metaOf(it.obj)[a2a.AGUIEventKey].(map[string]any); ok && strings.HasPrefix(fmt.Sprint(ev["type"]), "TOOL_CALL_") {
						tools = append(tools, fmt.Sprint(ev["type"]))
					}
				}
				if want := "TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_ARGS TOOL_CALL_END TOOL_CALL_RESULT"; strings.Join(tools, " ") != want {
					t.Errorf("tool events on the stream %q, want %q", tools, want)
				}
			}},
		{name: "RUN_ERROR with a code after some text",
			script: func(r, th string) []string {
				return []string{runStarted(th, r),
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"p","delta":"partial"}`,
					`{"type":"RUN_ERROR","message":"the model is down","code":"upstream_unavailable"}`}
			},
			state: "failed", artifacts: map[string]string{"p": "partial"},
			check: func(t *testing.T, v string, streamed []item, task map[string]any) {
				if streamed == nil {
					if !strings.Contains(statusText(task), "upstream_unavailable") {
						t.Errorf("failed task's status message %q does not name the code", statusText(task))
					}
					return
				}
				last := streamed[len(streamed)-1]
				if got := statusText(last.obj); !strings.Contains(got, "upstream_unavailable") {
					t.Errorf("the stream's failed status says %q: no code", got)
				}
				// doors.md §3.7.2: RUN_ERROR → FAILED with status.message an
				// agent message whose text is the event's message.
				if got := statusText(last.obj); !strings.Contains(got, "the model is down") {
					t.Errorf("the stream's failed status says %q: the provider's RUN_ERROR message %q is lost (doors.md §3.7.2)",
						got, "the model is down")
				}
			}},
		{name: "RUN_FINISHED with an interrupt outcome",
			script: func(r, th string) []string {
				return []string{runStarted(th, r),
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"q","delta":"May I?"}`,
					fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[`+
						`{"id":"int-1","reason":"confirm","message":"May I?"},{"id":"int-2","reason":"tool","toolCallId":"tc-9"}]}}`, th, r)}
			},
			state: "input-required", artifacts: map[string]string{"q": "May I?"},
			history: []string{"user:hi", "agent:May I?"},
			check: func(t *testing.T, v string, streamed []item, task map[string]any) {
				if streamed != nil {
					return
				}
				asks, _ := metaOf(task)[a2a.OutstandingAsksKey].([]any)
				if fmt.Sprint(asks) != "[int-1 tc-9]" {
					t.Errorf("outstanding asks %v, want [int-1 tc-9] (an interrupt's toolCallId stands for it)", metaOf(task))
				}
				if _, ok := metaOf(task)[a2a.InterruptKey]; !ok {
					t.Errorf("paused task carries no interrupt: %v", metaOf(task))
				}
			}},
	}
}

// A provider on the raw wire that behaves unlike our SDK: each script is
// followed through message/stream, a blocking message/send and a
// non-blocking send polled with tasks/get, in both protocol versions, and
// every answer agrees with the spec's projection (doors.md §3.7).
func TestOutsideProviderOddOrders(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("odd")
	srv := startDoor(t, h, nil)
	for _, v := range []string{"", "1.0"} {
		for ci, tc := range oddCases() {
			t.Run(fmt.Sprintf("v%s/%s", v, tc.name), func(t *testing.T) {
				c := newClient(t, srv, p.Key, "odd", v)
				get := func(id string, hl *int) map[string]any {
					params := map[string]any{"id": id}
					if hl != nil {
						params["historyLength"] = *hl
					}
					return c.ok(methodOf(v, "tasks/get"), params)
				}
				checkTask := func(mode string, task map[string]any, runID string) {
					t.Helper()
					if task["id"] != runID || stateOf(task) != wireState(v, tc.state) {
						t.Errorf("%s: task %v state %q, want %s in %s", mode, task["id"], stateOf(task), runID, wireState(v, tc.state))
					}
					if got := artifactsOf(task); !reflect.DeepEqual(got, tc.artifacts) {
						t.Errorf("%s: artifacts %v, want %v", mode, got, tc.artifacts)
					}
					if tc.history != nil {
						if got := historyTexts(task); !reflect.DeepEqual(got, tc.history) {
							t.Errorf("%s: history %q, want %q", mode, got, tc.history)
						}
					}
					if tc.check != nil {
						tc.check(t, v, nil, task)
					}
				}

				// message/stream.
				got := playNext(p, tc.script)
				s := c.stream(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message(fmt.Sprintf("s-%d", ci), "hi", nil)}), nil)
				items := normItems(t, v, s.rest())
				f := recv(t, got, "the stream's run played")
				if len(items) < 2 || items[0].kind != "task" {
					t.Fatalf("stream %v", items)
				}
				if st := stateOf(items[0].obj); st != wireState(v, "submitted") && st != wireState(v, "working") {
					t.Errorf("opening snapshot state %q", st)
				}
				seen, texts, prevID := map[string]bool{}, map[string]string{}, 0
				for i, it := range items {
					id := it.obj["taskId"]
					if i == 0 {
						id = it.obj["id"]
					}
					if id != f.RunID || it.obj["contextId"] != *f.ThreadID {
						t.Errorf("item %d names task %v context %v, want funduq's %s %s", i, id, it.obj["contextId"], f.RunID, *f.ThreadID)
					}
					if it.id != "" {
						var n int
						fmt.Sscan(it.id, &n)
						if n <= prevID {
							t.Errorf("SSE ids not increasing: %d after %d", n, prevID)
						}
						prevID = n
					}
					if it.kind == "artifact-update" {
						art, _ := it.obj["artifact"].(map[string]any)
						aid, _ := art["artifactId"].(string)
						if it.obj["append"] != seen[aid] {
							t.Errorf("artifact %s append=%v, want %v", aid, it.obj["append"], seen[aid])
						}
						seen[aid] = true
						texts[aid] += artifactsOf(map[string]any{"artifacts": []any{art}})[aid]
					}
					if v == "" && i < len(items)-1 && it.obj["final"] == true {
						t.Errorf("item %d is final before the end: %v", i, it.obj)
					}
				}
				last := items[len(items)-1]
				if last.kind != "status-update" || stateOf(last.obj) != wireState(v, tc.state) || v == "" && last.obj["final"] != true {
					t.Errorf("last stream item %s %v, want a final %s status", last.kind, last.obj, tc.state)
				}
				if !reflect.DeepEqual(texts, tc.artifacts) {
					t.Errorf("streamed artifacts %v, want %v", texts, tc.artifacts)
				}
				if tc.check != nil {
					tc.check(t, v, items, nil)
				}
				checkTask("tasks/get after the stream", get(f.RunID, nil), f.RunID)

				// A blocking message/send.
				got = playNext(p, tc.script)
				task := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message(fmt.Sprintf("b-%d", ci), "hi", nil)}))
				f = recv(t, got, "the blocking send's run played")
				checkTask("blocking send", task, f.RunID)
				blockingRun := f.RunID
				one, zero := 1, 0
				if tc.history != nil {
					g := get(f.RunID, &one)
					if h := historyTexts(g); len(h) != 1 || h[0] != tc.history[len(tc.history)-1] {
						t.Errorf("historyLength 1: %q, want the last of %q", h, tc.history)
					}
				}
				if h := historyTexts(get(f.RunID, &zero)); len(h) != 0 {
					t.Errorf("historyLength 0: %q", h)
				}

				// A non-blocking send, then tasks/get until it settles.
				cfg := map[string]any{"blocking": false}
				if v == "1.0" {
					cfg = map[string]any{"returnImmediately": true}
				}
				got = playNext(p, tc.script)
				task = taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message(fmt.Sprintf("n-%d", ci), "hi", nil), "configuration": cfg}))
				if st := stateOf(task); st != wireState(v, "submitted") && st != wireState(v, "working") {
					t.Errorf("non-blocking send answered %q", st)
				}
				f = recv(t, got, "the non-blocking send's run played")
				if task["id"] != f.RunID {
					t.Errorf("non-blocking send's task %v, offered %s", task["id"], f.RunID)
				}
				var polled map[string]any
				eventually(t, "tasks/get shows "+tc.state, func() bool {
					polled = get(f.RunID, nil)
					return stateOf(polled) == wireState(v, tc.state)
				})
				checkTask("tasks/get after a non-blocking send", polled, f.RunID)

				if tc.state == "input-required" {
					pausedFollowUps(t, p, c, v, f.RunID, *f.ThreadID)
					streamedAnswer(t, p, c, v, blockingRun)
				}
			})
		}
	}
}

// pausedFollowUps: a paused task can be resubscribed (the snapshot, one
// final input-required status, and the stream ends), and a message naming
// it answers it: the same task, the same run offered again.
func pausedFollowUps(t *testing.T, p *nodetest.Prov, c *client, v, taskID, ctxID string) {
	t.Helper()
	s := c.stream(c.body(methodOf(v, "tasks/resubscribe"), map[string]any{"id": taskID}), nil)
	items := normItems(t, v, s.rest())
	if len(items) != 2 || items[0].kind != "task" || stateOf(items[0].obj) != wireState(v, "input-required") ||
		items[1].kind != "status-update" || stateOf(items[1].obj) != wireState(v, "input-required") || v == "" && items[1].obj["final"] != true {
		t.Errorf("resubscribe to a paused task: %d items %v", len(items), items)
	}
	got := playNext(p, func(r, th string) []string {
		return []string{runStarted(th, r), `{"type":"TEXT_MESSAGE_CHUNK","messageId":"yes","delta":"thanks"}`, runFinished(th, r)}
	})
	task := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("ans-"+taskID, "yes", map[string]any{"taskId": taskID})}))
	f := recv(t, got, "the answer offered")
	if f.RunID != taskID || task["id"] != taskID || task["contextId"] != ctxID || stateOf(task) != wireState(v, "completed") {
		t.Errorf("answer: offered %s, task %v in %v state %q; want %s completed", f.RunID, task["id"], task["contextId"], stateOf(task), taskID)
	}
	if userText(t, f) != "yes" {
		t.Errorf("the answer's run input has %q", userText(t, f))
	}
}

// streamedAnswer answers paused task taskID through message/stream: the
// opening snapshot is the reopened task (no longer input-required, the
// answer in its history, the first round's artifact), the new round's
// events follow, the stream ends completed, and the task's artifacts are
// both rounds'.
func streamedAnswer(t *testing.T, p *nodetest.Prov, c *client, v, taskID string) {
	t.Helper()
	got := playNext(p, func(r, th string) []string {
		return []string{runStarted(th, r),
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"q","delta":" Yes."}`,
			`{"type":"TEXT_MESSAGE_CHUNK","messageId":"z","delta":"done"}`,
			runFinished(th, r)}
	})
	s := c.stream(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("sans-"+taskID, "go ahead", map[string]any{"taskId": taskID})}), nil)
	items := normItems(t, v, s.rest())
	f := recv(t, got, "the streamed answer offered")
	if f.RunID != taskID || len(items) < 2 {
		t.Fatalf("streamed answer: offered %s for %s; items %v", f.RunID, taskID, items)
	}
	open := items[0]
	if open.kind != "task" || open.obj["id"] != taskID {
		t.Fatalf("streamed answer's opening item %s %v", open.kind, open.obj)
	}
	if st := stateOf(open.obj); st != wireState(v, "submitted") && st != wireState(v, "working") {
		t.Errorf("streamed answer's snapshot state %q, want the reopened task's", st)
	}
	// The history is read as the snapshot is made: the agent's reply may
	// already follow the answer.
	if h := historyTexts(open.obj); len(h) < 3 || h[2] != "user:go ahead" {
		t.Errorf("streamed answer's snapshot history %q lacks the answer after the first round", h)
	}
	if a := artifactsOf(open.obj); a["q"] != "May I?" {
		t.Errorf("streamed answer's snapshot artifacts %v", a)
	}
	var appends []string
	for _, it := range items[1:] {
		if it.kind == "artifact-update" {
			art, _ := it.obj["artifact"].(map[string]any)
			appends = append(appends, fmt.Sprintf("%v:%v", art["artifactId"], it.obj["append"]))
		}
	}
	if strings.Join(appends, " ") != "q:true z:false" {
		t.Errorf("streamed answer's artifact updates %q, want q appended to the snapshot's and z new", appends)
	}
	last := items[len(items)-1]
	if last.kind != "status-update" || stateOf(last.obj) != wireState(v, "completed") {
		t.Errorf("streamed answer's last item %s %v", last.kind, last.obj)
	}
	task := c.ok(methodOf(v, "tasks/get"), map[string]any{"id": taskID})
	if a := artifactsOf(task); !reflect.DeepEqual(a, map[string]string{"q": "May I? Yes.", "z": "done"}) || stateOf(task) != wireState(v, "completed") {
		t.Errorf("after the streamed answer: %q %v", stateOf(task), a)
	}
}

// Two answers to one paused task at once (design.md D1): exactly one
// resumes the task (same id, same run offered again); the other's message
// is not lost but becomes an ordinary new task on the same context.
func TestOutsideConcurrentAnswers(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			srv := seatDoor(t, h)
			c := newClient(t, srv, p.Key, "echo", v)
			got := playNext(p, func(r, th string) []string {
				return []string{runStarted(th, r), fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ok?","reason":"confirm"}]}}`, th, r)}
			})
			paused := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("p", "start", nil)}))
			fp := recv(t, got, "the paused run")
			if paused["id"] != fp.RunID || stateOf(paused) != wireState(v, "input-required") {
				t.Fatalf("paused %v %q", paused["id"], stateOf(paused))
			}
			ctxID := *fp.ThreadID
			offers := make(chan wire.RunFrame, 2)
			go func() {
				for range 2 {
					f := p.Offer()
					p.Accept(f.RunID)
					p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
					p.Event(f.RunID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CHUNK","messageId":%q,"delta":%q}`, "re-"+userText(t, f), "ack "+userText(t, f)))
					p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
					p.Finish(f.RunID)
					offers <- f
				}
			}()
			var wg sync.WaitGroup
			answers := make([]map[string]any, 2)
			for i, seat := range []string{signer(t, 0xa1).PublicKeyHex(), signer(t, 0xb1).PublicKeyHex()} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sc := seatCaller{newClient(t, srv, p.Key, "echo", v), v, seat}
					r := sc.send(c.message(fmt.Sprintf("ans-%d", i), fmt.Sprintf("answer %d", i), map[string]any{"taskId": fp.RunID}), true)
					if r.Error != nil {
						t.Errorf("answer %d: %+v", i, r.Error)
						return
					}
					if v == "1.0" {
						r.Result, _ = r.Result["task"].(map[string]any)
					}
					answers[i] = r.Result
				}()
			}
			wg.Wait()
			f1, f2 := recv(t, offers, "first offer"), recv(t, offers, "second offer")
			if answers[0] == nil || answers[1] == nil {
				t.FailNow()
			}
			resumed := 0
			for i, a := range answers {
				if a["contextId"] != ctxID || stateOf(a) != wireState(v, "completed") {
					t.Errorf("answer %d: task %v in %v %q", i, a["id"], a["contextId"], stateOf(a))
				}
				if a["id"] == fp.RunID {
					resumed++
				}
				want := fmt.Sprintf("ack answer %d", i)
				if !strings.Contains(mustJSON(a["artifacts"]), want) {
					t.Errorf("answer %d's task %v does not show its own reply %q: %v", i, a["id"], want, a["artifacts"])
				}
			}
			if resumed != 1 || answers[0]["id"] == answers[1]["id"] {
				t.Errorf("tasks %v and %v: %d resumed %s, want exactly one", answers[0]["id"], answers[1]["id"], resumed, fp.RunID)
			}
			if (f1.RunID == fp.RunID) == (f2.RunID == fp.RunID) {
				t.Errorf("offers %s and %s: want the paused run once and one new run", f1.RunID, f2.RunID)
			}
		})
	}
}

// seatCaller sends as the caller the authorizer seat names.
type seatCaller struct {
	c    *client
	v    string
	seat string // "" anonymous
}

func (sc seatCaller) hdr() map[string]string {
	if sc.seat == "" {
		return nil
	}
	return map[string]string{seatHeader: sc.seat}
}

func (sc seatCaller) send(msg map[string]any, blocking bool) rpcResp {
	sc.c.t.Helper()
	cfg := map[string]any{"blocking": blocking}
	if sc.v == "1.0" {
		cfg = map[string]any{"returnImmediately": !blocking}
	}
	return sc.c.rawCall(sc.c.body(methodOf(sc.v, "message/send"), map[string]any{"message": msg, "configuration": cfg}), sc.hdr())
}

// Two callers on one agent at once, each on its own context: the provider
// takes both and interleaves their events, and each caller's answer holds
// only its own exchange. Then one caller's paused task is answered by the
// other (the context is unbound: its id is all it takes), which resumes
// the same task; the first caller's late answer naming it is the race's
// loser and becomes an ordinary new task on the context (design.md D1).
func TestOutsideTwoCallersAtOnce(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			srv := seatDoor(t, h)
			c := newClient(t, srv, p.Key, "echo", v)
			A := seatCaller{newClient(t, srv, p.Key, "echo", v), v, signer(t, 0xa1).PublicKeyHex()}
			B := seatCaller{newClient(t, srv, p.Key, "echo", v), v, signer(t, 0xb1).PublicKeyHex()}

			var wg sync.WaitGroup
			answers := map[string]map[string]any{}
			var mu sync.Mutex
			for _, who := range []struct {
				name string
				sc   seatCaller
			}{{"A", A}, {"B", B}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := who.sc.send(c.message("first-"+who.name, "from "+who.name, nil), true)
					mu.Lock()
					defer mu.Unlock()
					if r.Error != nil {
						t.Errorf("%s: %+v", who.name, r.Error)
						return
					}
					if v == "1.0" {
						r.Result, _ = r.Result["task"].(map[string]any)
					}
					answers[who.name] = r.Result
				}()
			}
			// The provider takes both, then interleaves: B's run ends first.
			frames := map[string]wire.RunFrame{}
			for range 2 {
				f := p.Offer()
				p.Accept(f.RunID)
				frames[strings.TrimPrefix(userText(t, f), "from ")] = f
			}
			fa, fb := frames["A"], frames["B"]
			if fa.RunID == "" || fb.RunID == "" || *fa.ThreadID == *fb.ThreadID {
				t.Fatalf("offers %v", frames)
			}
			for _, f := range []wire.RunFrame{fa, fb} {
				p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
				p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"r","role":"assistant"}`)
			}
			for _, f := range []wire.RunFrame{fb, fa} {
				p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":"reply to "}`)
			}
			for _, f := range []wire.RunFrame{fa, fb} {
				p.Event(f.RunID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"r","delta":%q}`, userText(t, f)))
			}
			for _, f := range []wire.RunFrame{fb, fa} {
				p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"r"}`)
				p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
				p.Finish(f.RunID)
			}
			wg.Wait()
			for name, f := range map[string]wire.RunFrame{"A": fa, "B": fb} {
				task := answers[name]
				if task["id"] != f.RunID || task["contextId"] != *f.ThreadID || stateOf(task) != wireState(v, "completed") {
					t.Errorf("%s's answer: task %v context %v state %q; want %s %s completed", name, task["id"], task["contextId"], stateOf(task), f.RunID, *f.ThreadID)
				}
				want := map[string]string{"r": "reply to from " + name}
				if got := artifactsOf(task); !reflect.DeepEqual(got, want) {
					t.Errorf("%s's artifacts %v, want %v", name, got, want)
				}
				if got := historyTexts(task); !reflect.DeepEqual(got, []string{"user:from " + name, "agent:reply to from " + name}) {
					t.Errorf("%s's history %q", name, got)
				}
			}

			// A pauses on its context.
			ctxA := *fa.ThreadID
			got := playNext(p, func(r, th string) []string {
				return []string{runStarted(th, r), fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ok?","reason":"confirm"}]}}`, th, r)}
			})
			paused := taskResult(t, v, A.send(c.message("second-A", "do it", map[string]any{"contextId": ctxA}), true))
			fp := recv(t, got, "A's second run")
			if paused["id"] != fp.RunID || stateOf(paused) != wireState(v, "input-required") {
				t.Fatalf("A's second task %v %q", paused["id"], stateOf(paused))
			}
			// B answers it.
			got = playNext(p, func(r, th string) []string {
				return []string{runStarted(th, r), `{"type":"TEXT_MESSAGE_CHUNK","messageId":"done","delta":"done for B"}`, runFinished(th, r)}
			})
			byB := taskResult(t, v, B.send(c.message("answer-B", "yes from B", map[string]any{"taskId": fp.RunID}), true))
			fr := recv(t, got, "B's answer offered")
			if fr.RunID != fp.RunID || byB["id"] != fp.RunID || byB["contextId"] != ctxA || stateOf(byB) != wireState(v, "completed") || userText(t, fr) != "yes from B" {
				t.Errorf("B's answer: offered %s (%q), task %v state %q; want %s resumed and completed", fr.RunID, userText(t, fr), byB["id"], stateOf(byB), fp.RunID)
			}
			// A's late answer: an ordinary new task on A's context.
			got = playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
			late := taskResult(t, v, A.send(c.message("answer-A", "yes from A", map[string]any{"taskId": fp.RunID}), true))
			fl := recv(t, got, "A's late answer offered")
			if fl.RunID == fp.RunID || late["id"] != fl.RunID || late["contextId"] != ctxA || stateOf(late) != wireState(v, "completed") {
				t.Errorf("A's late answer: offered %s, task %v in %v %q; want a new task on %s", fl.RunID, late["id"], late["contextId"], stateOf(late), ctxA)
			}
			// The resumed task still shows B's answer, not A's.
			if g := c.ok(methodOf(v, "tasks/get"), map[string]any{"id": fp.RunID}); strings.Contains(mustJSON(g["history"]), "yes from A") {
				t.Errorf("the resumed task's history holds A's late message: %v", g["history"])
			}
		})
	}
}

// A messageId belongs to its caller (design.md D17) on a context as on a
// new one: on a context two callers share, a caller's retry is recognised
// and a changed request under its key refused 422, but another caller's
// message with the same messageId — the same request or another — is that
// caller's own new task, never a refusal about someone else's key and
// never the other caller's task.
func TestOutsideMessageIDOnASharedContext(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			c := newClient(t, seatDoor(t, h), p.Key, "echo", v)
			A := seatCaller{c, v, signer(t, 0xa1).PublicKeyHex()}
			B := seatCaller{c, v, signer(t, 0xb1).PublicKeyHex()}
			C := seatCaller{c, v, signer(t, 0xc7).PublicKeyHex()}
			anon := seatCaller{c, v, ""}
			complete := func(what string) wire.RunFrame {
				t.Helper()
				f := recv(t, playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} }), what)
				h.WaitStatus(f.RunID, run.Completed)
				return f
			}
			first := taskResult(t, v, A.send(c.message("open", "open", nil), false))
			complete("A's first run")
			ctxID := first["contextId"].(string)

			mine := taskResult(t, v, A.send(c.message("m-same", "hello", map[string]any{"contextId": ctxID}), false))
			complete("A's m-same run")
			// A's own retry: the same task.
			if again := taskResult(t, v, A.send(c.message("m-same", "hello", map[string]any{"contextId": ctxID}), false)); again["id"] != mine["id"] {
				t.Errorf("A's retry answered task %v, want %v", again["id"], mine["id"])
			}
			// A's key with another request: 422.
			if r := A.send(c.message("m-same", "changed", map[string]any{"contextId": ctxID}), false); r.Error == nil || r.Error.Code != a2a.CodeKeyReused || r.Status != http.StatusUnprocessableEntity {
				t.Errorf("A reusing its messageId for another message: %d %+v, want 422 %d", r.Status, r.Error, a2a.CodeKeyReused)
			}
			// Another caller's messages under the same id are their own.
			for _, tc := range []struct {
				name string
				sc   seatCaller
				text string
			}{
				{"B, another message", B, "from B"},
				{"C, the same message", C, "hello"},
				{"an anonymous caller, the same message", anon, "hello"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					r := tc.sc.send(c.message("m-same", tc.text, map[string]any{"contextId": ctxID}), false)
					if r.Error != nil {
						t.Fatalf("refused: %d %d %s (the messageId is A's, not this caller's)", r.Status, r.Error.Code, r.Error.Message)
					}
					task := taskResult(t, v, r)
					if task["id"] == mine["id"] {
						t.Fatalf("answered with A's task %v: this caller's message %q was dropped", mine["id"], tc.text)
					}
					f := complete("the other caller's own run")
					if task["id"] != f.RunID || userText(t, f) != tc.text {
						t.Errorf("task %v, offered %s with %q", task["id"], f.RunID, userText(t, f))
					}
				})
			}
			// B's own key with another request is refused like A's.
			if r := B.send(c.message("m-same", "changed by B", map[string]any{"contextId": ctxID}), false); r.Error == nil || r.Error.Code != a2a.CodeKeyReused {
				t.Errorf("B reusing its messageId for another message: %d %+v, want %d", r.Status, r.Error, a2a.CodeKeyReused)
			}
			// The messageId of B's answer to A's paused task is B's too: A's
			// own later message under that id is A's new task.
			t.Run("A, after B's answer under the same id", func(t *testing.T) {
				got := playNext(p, func(r, th string) []string {
					return []string{runStarted(th, r), fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ok?","reason":"confirm"}]}}`, th, r)}
				})
				paused := taskResult(t, v, A.send(c.message("pause-me", "ask me", map[string]any{"contextId": ctxID}), true))
				recv(t, got, "A's pausing run")
				if stateOf(paused) != wireState(v, "input-required") {
					t.Fatalf("A's task %v %q", paused["id"], stateOf(paused))
				}
				answered := taskResult(t, v, B.send(c.message("a-shared", "yes", map[string]any{"taskId": paused["id"]}), false))
				if answered["id"] != paused["id"] {
					t.Fatalf("B's answer made task %v, want %v resumed", answered["id"], paused["id"])
				}
				complete("B's answer")
				r := A.send(c.message("a-shared", "something new", map[string]any{"contextId": ctxID}), false)
				if r.Error != nil {
					t.Fatalf("refused: %d %d %s (the messageId is B's, not A's)", r.Status, r.Error.Code, r.Error.Message)
				}
				task := taskResult(t, v, r)
				if task["id"] == paused["id"] {
					t.Fatalf("A's message was answered with B's answer's task %v", task["id"])
				}
				if f := complete("A's new run"); task["id"] != f.RunID || userText(t, f) != "something new" {
					t.Errorf("task %v, offered %s with %q", task["id"], f.RunID, userText(t, f))
				}
			})
		})
	}
}

// A stranger — no credentials, or an authenticated key that is no party,
// with or without an actor chain of its own — asking about another
// caller's bound task, paused or running, gets exactly what an unknown
// task id gets (HTTP status, code and message) from tasks/get,
// tasks/cancel, tasks/resubscribe, message/send and message/stream naming
// it (design.md D16); and the task is untouched: its head still reads it
// as it was, without a cancel marker.
func TestOutsideStrangersOnBoundTasks(t *testing.T) {
	a := newAuthz(t)
	// A paused bound task.
	r := a.boundSend(a.c.message("p-1", "hi", nil), nil, false)
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	a.p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"confirm"}]}}`, *f.ThreadID, f.RunID))
	a.p.Finish(f.RunID)
	pausedID := f.RunID
	a.h.WaitStatus(pausedID, run.InputRequired)
	// A running bound task.
	if r := a.boundSend(a.c.message("w-1", "hi", nil), nil, false); r.Error != nil {
		t.Fatal(r.Error)
	}
	g := a.p.Offer()
	a.p.Accept(g.RunID)
	a.p.Event(g.RunID, runStarted(*g.ThreadID, g.RunID))
	runningID := g.RunID
	a.h.WaitStatus(runningID, run.Running)

	stray := a.stray
	type asker struct {
		name string
		seat string
		// chain: the stranger presents its own chain with a presenter proof.
		chain bool
	}
	askers := []asker{{"no credentials", "", false}, {"another key at the seat", stray.PublicKeyHex(), false},
		{"another key with its own chain", "", true}}
	call := func(as asker, method string, params map[string]any) rpcResp {
		t.Helper()
		if as.chain {
			if md, ok := params["metadata"].(map[string]any); ok {
				md["actorChain"] = chainOf(t, stray)
			} else {
				params["metadata"] = map[string]any{"actorChain": chainOf(t, stray)}
			}
		}
		body := a.c.body(method, params)
		hdr := map[string]string{}
		if as.chain {
			hdr[identity.PresenterHeader] = identity.MakePresenterHeader(stray, time.Now().Unix(), []byte(body))
		}
		a.seat = as.seat
		defer func() { a.seat = "" }()
		return a.c.rawCall(body, hdr)
	}
	type method struct {
		name   string
		params func(id string) map[string]any
	}
	methods := []method{
		{"tasks/get", func(id string) map[string]any { return map[string]any{"id": id} }},
		{"tasks/cancel", func(id string) map[string]any { return map[string]any{"id": id} }},
		{"tasks/resubscribe", func(id string) map[string]any { return map[string]any{"id": id} }},
		{"message/send", func(id string) map[string]any {
			return map[string]any{"message": a.c.message("x-"+id, "let me in", map[string]any{"taskId": id})}
		}},
		{"message/stream", func(id string) map[string]any {
			return map[string]any{"message": a.c.message("y-"+id, "let me in", map[string]any{"taskId": id})}
		}},
	}
	for _, task := range []struct{ name, id string }{{"paused", pausedID}, {"running", runningID}} {
		for _, as := range askers {
			for _, m := range methods {
				t.Run(task.name+"/"+as.name+"/"+m.name, func(t *testing.T) {
					unknown := asErr(t, call(as, m.name, m.params(unknownTask)), "", "")
					got := asErr(t, call(as, m.name, m.params(task.id)), task.id, unknownTask)
					if got != unknown {
						t.Errorf("a stranger's %s on a %s bound task: %+v; an unknown task: %+v", m.name, task.name, got, unknown)
					}
				})
			}
		}
	}
	// The head still reads both as they were.
	now := time.Now().Unix()
	for id, want := range map[string]string{pausedID: "input-required", runningID: "working"} {
		r := a.callAs("tasks/get", map[string]any{"id": id}, viewHdr(a.head, id, now))
		if r.Error != nil || stateOf(r.Result) != want || metaOf(r.Result)[a2a.CancelRequestedKey] != nil {
			t.Errorf("the head reads %s: %+v %v, want %s with no cancel marker", id, r.Error, r.Result, want)
		}
	}
	a.p.Event(runningID, runFinished(*g.ThreadID, runningID))
	a.p.Finish(runningID)
	a.h.WaitStatus(runningID, run.Completed)
}

// Malformed JSON-RPC, in both versions: every body gets a typed JSON-RPC
// error, in a JSON body, with the request's id when it could be read (null
// otherwise), never a 5xx, never a hang, and nothing is written.
func TestOutsideMalformedJSONRPC(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	huge := strings.Repeat("x", 2<<20)
	bigButUnder := strings.Repeat("y", 900<<10)
	type bad struct {
		body   string
		code   int
		id     string // the id the answer must carry, as JSON
		status int    // 0: 200
	}
	for _, v := range []string{"", "1.0"} {
		get, send, stream := methodOf(v, "tasks/get"), methodOf(v, "message/send"), methodOf(v, "message/stream")
		cases := map[string]bad{
			"empty body":                {``, a2a.CodeParseError, "null", 0},
			"whitespace":                {"  \n", a2a.CodeParseError, "null", 0},
			"truncated":                 {`{"jsonrpc":"2.0","id":7,"method":"` + get, a2a.CodeParseError, "null", 0},
			"null":                      {`null`, a2a.CodeInvalidRequest, "null", 0},
			"a string":                  {`"hello"`, a2a.CodeInvalidRequest, "null", 0},
			"batch of one request":      {`[{"jsonrpc":"2.0","id":1,"method":"` + get + `","params":{"id":"x"}}]`, a2a.CodeInvalidRequest, "null", 0},
			"batch of two":              {`[{"jsonrpc":"2.0","id":1,"method":"` + get + `","params":{"id":"x"}},{"jsonrpc":"2.0","id":2,"method":"` + get + `","params":{"id":"y"}}]`, a2a.CodeInvalidRequest, "null", 0},
			"jsonrpc 1.0":               {`{"jsonrpc":"1.0","id":3,"method":"` + get + `","params":{"id":"x"}}`, a2a.CodeInvalidRequest, "3", 0},
			"jsonrpc a number":          {`{"jsonrpc":2.0,"id":3,"method":"` + get + `","params":{"id":"x"}}`, a2a.CodeInvalidRequest, "3", 0},
			"jsonrpc missing":           {`{"id":"s","method":"` + get + `","params":{"id":"x"}}`, a2a.CodeInvalidRequest, `"s"`, 0},
			"id true":                   {`{"jsonrpc":"2.0","id":true,"method":"` + get + `","params":{"id":"x"}}`, a2a.CodeInvalidRequest, "null", 0},
			"id an array":               {`{"jsonrpc":"2.0","id":[1],"method":"` + get + `","params":{"id":"x"}}`, a2a.CodeInvalidRequest, "null", 0},
			"id null (a notification?)": {`{"jsonrpc":"2.0","id":null,"method":"` + get + `","params":{"id":"x"}}`, a2a.CodeInvalidRequest, "null", 0},
			"no id (a notification)":    {`{"jsonrpc":"2.0","method":"` + get + `","params":{"id":"x"}}`, a2a.CodeInvalidRequest, "null", 0},
			"id a fraction":             {`{"jsonrpc":"2.0","id":1.5,"method":"` + get + `","params":{"id":"run_unknown"}}`, a2a.CodeTaskNotFound, "1.5", 0},
			"id a big integer":          {`{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"` + get + `","params":{"id":"run_unknown"}}`, a2a.CodeTaskNotFound, "123456789012345678901234567890", 0},
			"id a string":               {`{"jsonrpc":"2.0","id":"req-\u00e9","method":"nope/nothing","params":{}}`, a2a.CodeMethodNotFound, `"req-é"`, 0},
			"id an empty string":        {`{"jsonrpc":"2.0","id":"","method":"nope/nothing"}`, a2a.CodeMethodNotFound, `""`, 0},
			"unknown method":            {`{"jsonrpc":"2.0","id":4,"method":"tasks/delete","params":{"id":"x"}}`, a2a.CodeMethodNotFound, "4", 0},
			"method empty":              {`{"jsonrpc":"2.0","id":4,"method":""}`, a2a.CodeInvalidRequest, "4", 0},
			"method with other case":    {`{"jsonrpc":"2.0","id":4,"method":"` + strings.ToUpper(get) + `","params":{"id":"x"}}`, a2a.CodeMethodNotFound, "4", 0},
			"params an array":           {`{"jsonrpc":"2.0","id":5,"method":"` + get + `","params":["x"]}`, a2a.CodeInvalidParams, "5", 0},
			"params a string":           {`{"jsonrpc":"2.0","id":5,"method":"` + get + `","params":"x"}`, a2a.CodeInvalidParams, "5", 0},
			"params null":               {`{"jsonrpc":"2.0","id":5,"method":"` + get + `","params":null}`, a2a.CodeInvalidParams, "5", 0},
			"id of a wrong type":        {`{"jsonrpc":"2.0","id":5,"method":"` + get + `","params":{"id":7}}`, a2a.CodeInvalidParams, "5", 0},
			"historyLength a string":    {`{"jsonrpc":"2.0","id":5,"method":"` + get + `","params":{"id":"x","historyLength":"two"}}`, a2a.CodeInvalidParams, "5", 0},
			"historyLength negative":    {`{"jsonrpc":"2.0","id":5,"method":"` + get + `","params":{"id":"x","historyLength":-1}}`, a2a.CodeInvalidParams, "5", 0},
			"send without message":      {`{"jsonrpc":"2.0","id":6,"method":"` + send + `","params":{"configuration":{}}}`, a2a.CodeInvalidParams, "6", 0},
			"stream with bad params":    {`{"jsonrpc":"2.0","id":6,"method":"` + stream + `","params":{"message":{"messageId":"m","role":"user","parts":[]}}}`, a2a.CodeInvalidParams, "6", 0},
			"configuration a string":    {`{"jsonrpc":"2.0","id":6,"method":"` + send + `","params":{"message":{"messageId":"m","role":"user","parts":[{"text":"x"}]},"configuration":"fast"}}`, a2a.CodeInvalidParams, "6", 0},
			"a task id of 900 KiB":      {`{"jsonrpc":"2.0","id":8,"method":"` + get + `","params":{"id":"` + bigButUnder + `"}}`, a2a.CodeTaskNotFound, "8", 0},
			"params over the body cap":  {`{"jsonrpc":"2.0","id":9,"method":"` + send + `","params":{"message":{"messageId":"m","role":"user","parts":[{"text":"` + huge + `"}]}}}`, a2a.CodeInvalidRequest, "null", http.StatusRequestEntityTooLarge},
		}
		runs, threads := count(t, h, "runs"), count(t, h, "threads")
		c := newClient(t, srv, p.Key, "echo", v)
		for name, tc := range cases {
			t.Run("v"+v+"/"+name, func(t *testing.T) {
				resp, cancel := c.post(tc.body, nil)
				defer cancel()
				defer resp.Body.Close()
				var r struct {
					JSONRPC string          `json:"jsonrpc"`
					ID      json.RawMessage `json:"id"`
					Result  json.RawMessage `json:"result"`
					Error   *struct {
						Code    int    `json:"code"`
						Message string `json:"message"`
					} `json:"error"`
				}
				if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
					t.Fatalf("answer %d %s is not JSON: %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
				}
				want := tc.status
				if want == 0 {
					want = http.StatusOK
				}
				if resp.StatusCode != want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Errorf("HTTP %d %s, want %d application/json", resp.StatusCode, resp.Header.Get("Content-Type"), want)
				}
				if r.JSONRPC != "2.0" || r.Error == nil || r.Error.Code != tc.code || r.Error.Message == "" || r.Result != nil {
					t.Errorf("answer jsonrpc %q error %+v result %s, want error %d", r.JSONRPC, r.Error, r.Result, tc.code)
				}
				if normID(r.ID) != normID([]byte(tc.id)) {
					t.Errorf("answer id %s, want %s", r.ID, tc.id)
				}
			})
		}
		if r, th := count(t, h, "runs"), count(t, h, "threads"); r != runs || th != threads {
			t.Fatalf("malformed requests wrote rows: runs %d→%d threads %d→%d", runs, r, threads, th)
		}
	}
	p.None()
}

// Nothing is stored after a run's terminal event (design.md §The status
// machine), and a report the broker does not take is answered (D15): a
// raw-wire provider that sends one more text event after its RUN_FINISHED,
// right behind its accept, has that event refused on the link, and the
// caller sees one run — tasks/get's artifacts and history are what the
// stream showed, ending at the RUN_FINISHED.
func TestOutsideNothingStoredAfterTheEnd(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("odd")
			c := newClient(t, startDoor(t, h, nil), p.Key, "odd", v)
			got := playNext(p, func(r, th string) []string {
				return []string{runStarted(th, r),
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"done"}`,
					runFinished(th, r),
					`{"type":"TEXT_MESSAGE_CHUNK","messageId":"late","delta":"after the end"}`}
			})
			s := c.stream(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("late-1", "hi", nil)}), nil)
			items := normItems(t, v, s.rest())
			f := recv(t, got, "the run played")
			streamed := map[string]string{}
			for _, it := range items {
				if it.kind == "artifact-update" {
					art, _ := it.obj["artifact"].(map[string]any)
					for id, text := range artifactsOf(map[string]any{"artifacts": []any{art}}) {
						streamed[id] += text
					}
				}
			}
			if last := items[len(items)-1]; stateOf(last.obj) != wireState(v, "completed") {
				t.Errorf("stream ended %v", last.obj)
			}
			task := c.ok(methodOf(v, "tasks/get"), map[string]any{"id": f.RunID})
			if arts := artifactsOf(task); !reflect.DeepEqual(arts, streamed) || !reflect.DeepEqual(arts, map[string]string{"m": "done"}) {
				t.Errorf("tasks/get shows artifacts %v, the stream showed %v: the event after RUN_FINISHED was stored", arts, streamed)
			}
			if hist := historyTexts(task); !reflect.DeepEqual(hist, []string{"user:hi", "agent:done"}) {
				t.Errorf("tasks/get shows history %q: the event after RUN_FINISHED became a message", hist)
			}
			var e struct {
				Message string `json:"message"`
				RunID   string `json:"runId"`
			}
			p.Expect(wire.TypeError, &e)
			if e.RunID != f.RunID || !strings.Contains(e.Message, "already reported its end") {
				t.Errorf("the provider was told %+v", e)
			}
		})
	}
}

// A task that pauses, is answered, and pauses again: each pause shows its
// own ask — tasks/get's outstanding asks and the stream's final
// input-required item name the second interrupt, not the first — and the
// third message completes the same task.
func TestOutsidePausesTwice(t *testing.T) {
	for _, v := range []string{"", "1.0"} {
		t.Run("v"+v, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("odd")
			c := newClient(t, startDoor(t, h, nil), p.Key, "odd", v)
			ask := func(id string) func(r, th string) []string {
				return func(r, th string) []string {
					return []string{runStarted(th, r),
						fmt.Sprintf(`{"type":"TEXT_MESSAGE_CHUNK","messageId":%q,"delta":"question %s"}`, "q-"+id, id),
						fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":%q,"reason":"confirm"}]}}`, th, r, id)}
				}
			}
			got := playNext(p, ask("a1"))
			first := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("m1", "start", nil)}))
			f := recv(t, got, "the first round")
			id := f.RunID
			if first["id"] != id || fmt.Sprint(metaOf(first)[a2a.OutstandingAsksKey]) != "[a1]" {
				t.Fatalf("first pause: %v %v", first["id"], metaOf(first))
			}
			// The answer, streamed; the run pauses again.
			got = playNext(p, ask("a2"))
			s := c.stream(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("m2", "yes", map[string]any{"taskId": id})}), nil)
			items := normItems(t, v, s.rest())
			if f := recv(t, got, "the second round"); f.RunID != id {
				t.Fatalf("the answer offered %s, want %s", f.RunID, id)
			}
			last := items[len(items)-1]
			if stateOf(last.obj) != wireState(v, "input-required") || v == "" && last.obj["final"] != true {
				t.Errorf("second round's stream ended %v", last.obj)
			}
			if in := mustJSON(metaOf(last.obj)[a2a.InterruptKey]); !strings.Contains(in, `"a2"`) || strings.Contains(in, `"a1"`) {
				t.Errorf("second round's final item carries interrupt %s, want a2's alone", in)
			}
			got2 := c.ok(methodOf(v, "tasks/get"), map[string]any{"id": id})
			if stateOf(got2) != wireState(v, "input-required") || fmt.Sprint(metaOf(got2)[a2a.OutstandingAsksKey]) != "[a2]" {
				t.Errorf("after the second pause: %q asks %v", stateOf(got2), metaOf(got2)[a2a.OutstandingAsksKey])
			}
			if want := map[string]string{"q-a1": "question a1", "q-a2": "question a2"}; !reflect.DeepEqual(artifactsOf(got2), want) {
				t.Errorf("artifacts over both rounds %v, want %v", artifactsOf(got2), want)
			}
			// The third message completes it.
			got = playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
			done := taskResult(t, v, c.call(methodOf(v, "message/send"), map[string]any{"message": c.message("m3", "yes again", map[string]any{"taskId": id})}))
			recv(t, got, "the third round")
			if done["id"] != id || stateOf(done) != wireState(v, "completed") || metaOf(done)[a2a.OutstandingAsksKey] != nil {
				t.Errorf("third round: %v %q %v", done["id"], stateOf(done), metaOf(done))
			}
			if hist := historyTexts(done); !reflect.DeepEqual(hist, []string{"user:start", "agent:question a1", "user:yes", "agent:question a2", "user:yes again"}) {
				t.Errorf("history %q", hist)
			}
		})
	}
}
