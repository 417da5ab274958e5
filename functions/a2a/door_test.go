package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
)

func getJSON(t *testing.T, url string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// The card is built from the registration, in the shape of the version
// asked for, with the door URL derived from the forwarded host.
func TestAgentCard(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "echo", Description: "echoes",
		AgentCardExtra:     json.RawMessage(`{"skills":[{"id":"echo","name":"Echo","tags":["t"]},{"name":"no id"},7]}`),
		TakesInterjections: true}}})
	p.Expect(wire.TypeRegistered, nil)
	srv := startDoor(t, h, nil)
	fp := identity.Fingerprint(mustPub(t, p.Key))
	url := srv.URL + "/a2a/" + p.Key + "/echo/.well-known/agent-card.json"

	code, card := getJSON(t, url, map[string]string{"A2A-Version": "1.0", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "door.example"})
	if code != 200 || card["name"] != "echo" || card["description"] != "echoes" || card["version"] != a2a.DefaultAgentVersion {
		t.Fatalf("card %d %v", code, card)
	}
	ifs, _ := card["supportedInterfaces"].([]any)
	first, _ := ifs[0].(map[string]any)
	if len(ifs) != 2 || first["url"] != "https://door.example/a2a/"+fp+"/echo" || first["protocolBinding"] != "JSONRPC" || first["protocolVersion"] != "1.0" {
		t.Errorf("interfaces %v", ifs)
	}
	caps, _ := card["capabilities"].(map[string]any)
	exts, _ := caps["extensions"].([]any)
	if caps["streaming"] != true || len(exts) != 1 || exts[0].(map[string]any)["uri"] != a2a.InterjectionExtension {
		t.Errorf("capabilities %v", caps)
	}
	if skills, _ := card["skills"].([]any); len(skills) != 1 || skills[0].(map[string]any)["name"] != "Echo" {
		t.Errorf("skills %v", card["skills"])
	}
	code, legacy := getJSON(t, srv.URL+"/a2a/"+fp+"/echo/.well-known/agent-card.json", nil)
	if code != 200 || legacy["url"] != srv.URL+"/a2a/"+fp+"/echo" || legacy["protocolVersion"] != "0.3.0" || legacy["supportedInterfaces"] != nil {
		t.Errorf("v0.3 card %d %v", code, legacy)
	}
	if code, _ := getJSON(t, srv.URL+"/a2a/"+p.Key+"/nobody/.well-known/agent-card.json", nil); code != 404 {
		t.Errorf("unknown agent's card: %d", code)
	}
}

func mustPub(t *testing.T, hex string) []byte {
	pub, err := identity.ParsePublicKey(hex)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// A blocking send in each version: the task completes with the provider's
// text as an artifact and both sides of the exchange in history; GetTask
// agrees; a known caller's retry with the same messageId returns the same
// task (an anonymous one's does not: TestAnonymousStrangersDoNotShareATask).
func TestBlockingSend(t *testing.T) {
	for _, version := range []string{"", "1.0"} {
		t.Run("v"+version, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			caller := signer(t, 0xc3).PublicKeyHex()
			srv := startDoor(t, h, func(o *a2a.Options) { o.AuthorizedKey = func(*http.Request) string { return caller } })
			c := newClient(t, srv, p.Key, "echo", version)
			done := make(chan string, 1)
			go func() {
				f := p.Offer()
				p.Accept(f.RunID)
				p.Complete(f.RunID, *f.ThreadID)
				done <- f.RunID
			}()
			task := c.send(c.message("m-1", "hi", nil), nil)
			id := <-done
			completed := "completed"
			if version == "1.0" {
				completed = "TASK_STATE_COMPLETED"
			}
			if task["id"] != id || stateOf(task) != completed {
				t.Fatalf("task %v", task)
			}
			arts, _ := task["artifacts"].([]any)
			if len(arts) != 1 || !strings.Contains(fmt.Sprint(arts[0]), "hello") {
				t.Errorf("artifacts %v", arts)
			}
			if hist, _ := task["history"].([]any); len(hist) != 2 {
				t.Errorf("history %v", task["history"])
			}
			// Same messageId: the same task, nothing new written.
			runs := count(t, h, "runs")
			again := c.send(c.message("m-1", "hi", nil), nil)
			if again["id"] != id || count(t, h, "runs") != runs {
				t.Errorf("retry made %v (runs %d→%d)", again["id"], runs, count(t, h, "runs"))
			}
			get := "tasks/get"
			if version == "1.0" {
				get = "GetTask"
			}
			got := c.ok(get, map[string]any{"id": id, "historyLength": 1})
			if got["id"] != id || stateOf(got) != completed || len(got["history"].([]any)) != 1 {
				t.Errorf("get %v", got)
			}
			// The next message on the context is a new task on the same thread,
			// and a retry of it is recognised per thread.
			ctxID := task["contextId"].(string)
			go func() {
				f := p.Offer()
				p.Accept(f.RunID)
				p.Complete(f.RunID, *f.ThreadID)
			}()
			second := c.send(c.message("m-2", "again", map[string]any{"contextId": ctxID}), nil)
			if second["contextId"] != ctxID || second["id"] == id {
				t.Errorf("second task %v", second)
			}
			if again := c.send(c.message("m-2", "again", map[string]any{"contextId": ctxID}), nil); again["id"] != second["id"] {
				t.Errorf("retry on a context made %v", again["id"])
			}
		})
	}
}

// Reproduction (outside test): two anonymous callers sending the same
// message (same messageId and text) were handed one task, and with it the
// first caller's context. A messageId is an identifier, not a credential
// (design.md D16): each anonymous message opening a context is its own task.
func TestAnonymousStrangersDoNotShareATask(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	go func() {
		for range 2 {
			f := p.Offer()
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
		}
	}()
	first := c.send(c.message("m-1", "hi", nil), nil)
	second := c.send(c.message("m-1", "hi", nil), nil)
	if first["id"] == second["id"] || first["contextId"] == second["contextId"] || count(t, h, "runs") != 2 {
		t.Fatalf("two strangers: tasks %v and %v, contexts %v and %v", first["id"], second["id"], first["contextId"], second["contextId"])
	}
}

// Refusals answer the right JSON-RPC code and write nothing.
func TestRefusals(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	other := h.Connect(0xe2, nil)
	other.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	// An existing task of another agent.
	go func() {
		f := other.Offer()
		other.Accept(f.RunID)
		other.Complete(f.RunID, *f.ThreadID)
	}()
	foreign := newClient(t, srv, other.Key, "echo", "").send(c.message("f-1", "x", nil), nil)
	runs, threads := count(t, h, "runs"), count(t, h, "threads")

	for body, code := range map[string]int{
		`{`:  a2a.CodeParseError,
		`[]`: a2a.CodeInvalidRequest,
		`{"jsonrpc":"2.0","method":"message/send"}`:                                        a2a.CodeInvalidRequest,
		`{"jsonrpc":"2.0","id":1,"method":"message/sand","params":{}}`:                     a2a.CodeMethodNotFound,
		`{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{}}`:                      a2a.CodeMethodNotFound,
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":[]}`:                     a2a.CodeInvalidParams,
		`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`:                     a2a.CodeInvalidParams,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}`:                        a2a.CodeInvalidParams,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/pushNotificationConfig/set","params":{}}`: a2a.CodePushNotificationNotSupported,
		`{"jsonrpc":"2.0","id":1,"method":"agent/getAuthenticatedExtendedCard"}`:           a2a.CodeUnsupportedOperation,
	} {
		r := c.rawCall(body, nil)
		if r.Error == nil || r.Error.Code != code || r.Status != 200 {
			t.Errorf("%s → %d %+v, want %d", body, r.Status, r.Error, code)
		}
	}
	if r := c.rawCall(c.body("tasks/get", map[string]any{"id": "x"}), map[string]string{"A2A-Version": "2.0"}); r.Error == nil || r.Error.Code != a2a.CodeVersionNotSupported {
		t.Errorf("A2A-Version 2.0: %+v", r.Error)
	}
	v1 := newClient(t, srv, p.Key, "echo", "1.0")
	v1.code(a2a.CodePushNotificationNotSupported, "CreateTaskPushNotificationConfig", map[string]any{})
	v1.code(a2a.CodePushNotificationNotSupported, "ListTaskPushNotificationConfigs", map[string]any{})

	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("r-1", "x", map[string]any{"contextId": "thread_unknown"})})
	c.code(a2a.CodeTaskNotFound, "message/send", map[string]any{"message": c.message("r-2", "x", map[string]any{"taskId": "run_unknown"})})
	c.code(a2a.CodeTaskNotFound, "message/send", map[string]any{"message": c.message("r-3", "x", map[string]any{"taskId": foreign["id"]})})
	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("r-4", "x", map[string]any{"contextId": foreign["contextId"]})})
	// A role A2A does not have (outside test: "boss" was taken for the user's).
	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("r-7", "x", map[string]any{"role": "boss"})})
	c.code(a2a.CodeContentTypeNotSupported, "message/send", map[string]any{"message": map[string]any{"messageId": "r-5", "role": "user",
		"parts": []any{map[string]any{"kind": "file", "file": map[string]any{"uri": "x"}}}}})
	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("r-6", "x", nil),
		"metadata": map[string]any{"kyok": map[string]any{"llmProvider": map[string]any{"providerKey": p.Key, "name": "none"}}}})
	c.code(a2a.CodeInvalidParams, "message/send", map[string]any{"message": c.message("r-7", "x", nil),
		"metadata": map[string]any{a2a.AddressedRunIDKey: "run_x"}})
	c.code(a2a.CodeTaskNotFound, "tasks/get", map[string]any{"id": foreign["id"]})
	c.code(a2a.CodeTaskNotFound, "tasks/cancel", map[string]any{"id": foreign["id"]})
	c.code(a2a.CodeTaskNotFound, "tasks/resubscribe", map[string]any{"id": "run_unknown"})
	// A chain without a presenter: 401.
	chain := chainOf(t, signer(t, 0xc1))
	if r := c.call("message/send", map[string]any{"message": c.message("r-8", "x", nil), "metadata": map[string]any{"actorChain": chain}}); r.Status != 401 || r.Error == nil || r.Error.Code != a2a.CodeUnauthenticated {
		t.Errorf("chain without presenter: %d %+v", r.Status, r.Error)
	}
	// An unknown agent is a 404 before JSON-RPC.
	if r, cancel := newClient(t, srv, p.Key, "nobody", "").post(`{`, nil); r.StatusCode != 404 {
		t.Errorf("unknown agent: %d", r.StatusCode)
		cancel()
	} else {
		r.Body.Close()
		cancel()
	}
	if r, th := count(t, h, "runs"), count(t, h, "threads"); r != runs || th != threads {
		t.Fatalf("refusals wrote rows: runs %d→%d threads %d→%d", runs, r, threads, th)
	}
	p.None()
}

// message/stream (v0.3): the task first, then status and artifact updates
// from the run's events with SSE ids, then the final status from the
// record; resubscribe resumes after a Last-Event-ID.
func TestStreamingSend(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "")
	s := c.stream(c.body("message/stream", map[string]any{"message": c.message("s-1", "hi", nil)}), nil)
	first, ok := s.next()
	if !ok || first.Resp.Result["kind"] != "task" || stateOf(first.Resp.Result) != "submitted" {
		t.Fatalf("first item %+v", first)
	}
	if hist, _ := first.Resp.Result["history"].([]any); len(hist) != 1 {
		t.Errorf("opening snapshot history %v", first.Resp.Result["history"])
	}
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hel"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"lo"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	items := append([]sseItem{first}, s.rest()...)
	got := strings.Join(kinds(items), " ")
	want := "task:submitted status-update:working status-update:working artifact-update artifact-update status-update:working status-update:completed"
	if got != want {
		t.Fatalf("stream\n got %s\nwant %s", got, want)
	}
	if items[3].Resp.Result["append"] != false || items[4].Resp.Result["append"] != true || items[3].ID != "3" {
		t.Errorf("artifact items %+v %+v", items[3], items[4])
	}
	last := items[len(items)-1].Resp.Result
	if last["final"] != true || last["taskId"] != f.RunID {
		t.Errorf("final %v", last)
	}
	h.WaitStatus(f.RunID, run.Completed)
	// Resubscribing to a finished task is refused.
	c.code(a2a.CodeUnsupportedOperation, "tasks/resubscribe", map[string]any{"id": f.RunID})
}

// A resubscribe with Last-Event-ID gets the task as of that event, then
// every later event once.
func TestResubscribeResumes(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "echo", "1.0")
	task := c.send(c.message("q-1", "hi", nil), map[string]any{"configuration": map[string]any{"returnImmediately": true}})
	if st := stateOf(task); st != "TASK_STATE_SUBMITTED" && st != "TASK_STATE_WORKING" {
		t.Fatalf("non-blocking send: %v", task)
	}
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"a"}`)
	h.Eventually("two events stored", func() bool { return h.Run(f.RunID).LastSeq == 2 })
	s := c.stream(c.body("SubscribeToTask", map[string]any{"id": f.RunID}), map[string]string{a2a.LastEventIDHeader: "1"})
	open, _ := s.next()
	tk, _ := open.Resp.Result["task"].(map[string]any)
	if tk == nil || tk["artifacts"] != nil {
		t.Fatalf("opening item as of seq 1: %v", open.Resp.Result)
	}
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"b"}`)
	p.Event(f.RunID, runFinished(*f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	rest := s.rest()
	var seqs []string
	for _, it := range rest {
		seqs = append(seqs, it.ID)
	}
	if len(rest) != 3 || rest[0].Resp.Result["artifactUpdate"] == nil || rest[0].ID != "2" || rest[1].ID != "3" {
		t.Fatalf("resumed items %v %+v", seqs, rest)
	}
	fin, _ := rest[2].Resp.Result["statusUpdate"].(map[string]any)
	if stateOf(fin) != "TASK_STATE_COMPLETED" {
		t.Errorf("final %v", rest[2].Resp.Result)
	}
	if got := c.ok("GetTask", map[string]any{"id": f.RunID}); !strings.Contains(fmt.Sprint(got["artifacts"]), "text:ab") {
		t.Errorf("artifacts %v", got["artifacts"])
	}
}

// An agent nobody serves: the blocking send answers failed, with the
// reason in the status message.
func TestOfflineFails(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe9, nil)
	p.Register("gone")
	p.Close()
	h.Eventually("gone is unserved", func() bool {
		as, err := h.Store.ListAgents(context.Background())
		return err == nil && len(as) == 1 && !as[0].Online
	})
	srv := startDoor(t, h, nil)
	c := newClient(t, srv, p.Key, "gone", "")
	task := c.send(c.message("o-1", "hi", nil), nil)
	msg, _ := task["status"].(map[string]any)["message"].(map[string]any)
	if stateOf(task) != "failed" || !strings.Contains(fmt.Sprint(msg["parts"]), string(run.ReasonAgentOffline)) {
		t.Fatalf("task %v", task)
	}
}
