package a2a_test

// What an A2A caller receives, checked against the protocol's types as the
// pinned @a2a-js/sdk (functions/a2a/e2e/package.json) declares them: for
// 0.3 its compat/v0_3 types (kind discriminators, lowercase states, a
// required final flag on status updates); for 1.0 its ProtoJSON types
// (a2a.d.ts: TASK_STATE_* and ROLE_* enum names, parts as a oneof, stream
// items wrapped by their oneof name, no member the message does not
// declare, since a strict ProtoJSON reader rejects unknown fields).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/internal/seeds"
)

// conf checks one decoded JSON value against the SDK's types in version v,
// collecting every mismatch with its path.
type conf struct {
	v    string // "" (0.3) or "1.0"
	errs []string
}

func (c *conf) bad(path, format string, args ...any) {
	c.errs = append(c.errs, path+": "+fmt.Sprintf(format, args...))
}

func (c *conf) v1() bool { return c.v == "1.0" }

// obj reads a required (or, with opt, optional) object member.
func (c *conf) obj(o map[string]any, key, path string, opt bool) (map[string]any, bool) {
	raw, ok := o[key]
	if !ok {
		if !opt {
			c.bad(path, "required member %q missing", key)
		}
		return nil, false
	}
	m, ok := raw.(map[string]any)
	if !ok {
		c.bad(path+"."+key, "want an object, got %T", raw)
	}
	return m, ok
}

func (c *conf) str(o map[string]any, key, path string, opt bool) (string, bool) {
	raw, ok := o[key]
	if !ok {
		if !opt {
			c.bad(path, "required member %q missing", key)
		}
		return "", false
	}
	s, ok := raw.(string)
	if !ok {
		c.bad(path+"."+key, "want a string, got %T", raw)
	}
	return s, ok
}

func (c *conf) boolean(o map[string]any, key, path string, opt bool) (bool, bool) {
	raw, ok := o[key]
	if !ok {
		if !opt {
			c.bad(path, "required member %q missing", key)
		}
		return false, false
	}
	b, ok := raw.(bool)
	if !ok {
		c.bad(path+"."+key, "want a boolean, got %T", raw)
	}
	return b, ok
}

func (c *conf) arr(o map[string]any, key, path string, opt bool) ([]any, bool) {
	raw, ok := o[key]
	if !ok {
		if !opt {
			c.bad(path, "required member %q missing", key)
		}
		return nil, false
	}
	a, ok := raw.([]any)
	if !ok {
		c.bad(path+"."+key, "want an array, got %T", raw)
	}
	return a, ok
}

func (c *conf) strs(o map[string]any, key, path string, opt bool) {
	a, _ := c.arr(o, key, path, opt)
	for i, e := range a {
		if _, ok := e.(string); !ok {
			c.bad(fmt.Sprintf("%s.%s[%d]", path, key, i), "want a string, got %T", e)
		}
	}
}

// only flags members the 1.0 message does not declare (ProtoJSON).
func (c *conf) only(o map[string]any, path string, known ...string) {
	if !c.v1() {
		return
	}
	for k := range o {
		if !slices.Contains(known, k) {
			c.bad(path, "member %q is not a field of the 1.0 message", k)
		}
	}
}

// kind checks the 0.3 discriminator.
func (c *conf) kind(o map[string]any, path, want string) {
	if c.v1() {
		return
	}
	if k, ok := c.str(o, "kind", path, false); ok && k != want {
		c.bad(path+".kind", "%q, want %q", k, want)
	}
}

var (
	states03 = []string{"submitted", "working", "input-required", "completed", "canceled", "failed", "rejected", "auth-required", "unknown"}
	states10 = []string{"TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED", "TASK_STATE_FAILED",
		"TASK_STATE_CANCELED", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_REJECTED", "TASK_STATE_AUTH_REQUIRED"}
)

func (c *conf) task(o map[string]any, path string) {
	c.kind(o, path, "task")
	c.only(o, path, "id", "contextId", "status", "artifacts", "history", "metadata")
	if id, ok := c.str(o, "id", path, false); ok && id == "" {
		c.bad(path+".id", "empty")
	}
	c.str(o, "contextId", path, false)
	if st, ok := c.obj(o, "status", path, false); ok {
		c.status(st, path+".status")
	}
	arts, _ := c.arr(o, "artifacts", path, true)
	for i, a := range arts {
		c.artifactAny(a, fmt.Sprintf("%s.artifacts[%d]", path, i))
	}
	hist, _ := c.arr(o, "history", path, true)
	for i, m := range hist {
		c.messageAny(m, fmt.Sprintf("%s.history[%d]", path, i))
	}
	c.obj(o, "metadata", path, true)
}

func (c *conf) status(o map[string]any, path string) {
	c.only(o, path, "state", "message", "timestamp")
	if s, ok := c.str(o, "state", path, false); ok {
		if enum := map[bool][]string{false: states03, true: states10}[c.v1()]; !slices.Contains(enum, s) {
			c.bad(path+".state", "%q is not one of %v", s, enum)
		}
	}
	if m, ok := c.obj(o, "message", path, true); ok {
		c.message(m, path+".message")
	}
	if ts, ok := c.str(o, "timestamp", path, true); ok {
		if _, err := time.Parse(time.RFC3339Nano, ts); err != nil {
			c.bad(path+".timestamp", "%q is not an ISO 8601 timestamp", ts)
		}
	}
}

func (c *conf) messageAny(raw any, path string) {
	if m, ok := raw.(map[string]any); ok {
		c.message(m, path)
		return
	}
	c.bad(path, "want a Message object, got %T", raw)
}

func (c *conf) message(o map[string]any, path string) {
	c.kind(o, path, "message")
	c.only(o, path, "messageId", "contextId", "taskId", "role", "parts", "metadata", "extensions", "referenceTaskIds")
	c.str(o, "messageId", path, false)
	c.str(o, "contextId", path, true)
	c.str(o, "taskId", path, true)
	if r, ok := c.str(o, "role", path, false); ok {
		if enum := map[bool][]string{false: {"agent", "user"}, true: {"ROLE_USER", "ROLE_AGENT"}}[c.v1()]; !slices.Contains(enum, r) {
			c.bad(path+".role", "%q is not one of %v", r, enum)
		}
	}
	c.parts(o, path)
	c.obj(o, "metadata", path, true)
	c.strs(o, "extensions", path, true)
	c.strs(o, "referenceTaskIds", path, true)
}

func (c *conf) parts(o map[string]any, path string) {
	ps, _ := c.arr(o, "parts", path, false)
	for i, raw := range ps {
		pp := fmt.Sprintf("%s.parts[%d]", path, i)
		p, ok := raw.(map[string]any)
		if !ok {
			c.bad(pp, "want a Part object, got %T", raw)
			continue
		}
		c.obj(p, "metadata", pp, true)
		if c.v1() {
			c.only(p, pp, "text", "raw", "url", "data", "metadata", "filename", "mediaType")
			n := 0
			for _, k := range []string{"text", "raw", "url", "data"} {
				if _, ok := p[k]; ok {
					n++
				}
			}
			if n != 1 {
				c.bad(pp, "%d of the content oneof (text, raw, url, data) set, want exactly 1", n)
			}
			c.str(p, "text", pp, true)
			continue
		}
		k, _ := c.str(p, "kind", pp, false)
		switch k {
		case "text":
			c.str(p, "text", pp, false)
		case "file":
			c.obj(p, "file", pp, false)
		case "data":
			c.obj(p, "data", pp, false)
		default:
			c.bad(pp+".kind", "%q is not text, file or data", k)
		}
	}
}

func (c *conf) artifactAny(raw any, path string) {
	if a, ok := raw.(map[string]any); ok {
		c.artifact(a, path)
		return
	}
	c.bad(path, "want an Artifact object, got %T", raw)
}

func (c *conf) artifact(o map[string]any, path string) {
	c.only(o, path, "artifactId", "name", "description", "parts", "metadata", "extensions")
	if id, ok := c.str(o, "artifactId", path, false); ok && id == "" {
		c.bad(path+".artifactId", "empty")
	}
	c.str(o, "name", path, true)
	c.str(o, "description", path, true)
	c.parts(o, path)
	c.obj(o, "metadata", path, true)
	c.strs(o, "extensions", path, true)
}

func (c *conf) statusUpdate(o map[string]any, path string) {
	c.kind(o, path, "status-update")
	c.only(o, path, "taskId", "contextId", "status", "metadata")
	c.str(o, "taskId", path, false)
	c.str(o, "contextId", path, false)
	if st, ok := c.obj(o, "status", path, false); ok {
		c.status(st, path+".status")
	}
	if !c.v1() {
		c.boolean(o, "final", path, false)
	}
	c.obj(o, "metadata", path, true)
}

func (c *conf) artifactUpdate(o map[string]any, path string) {
	c.kind(o, path, "artifact-update")
	c.only(o, path, "taskId", "contextId", "artifact", "append", "lastChunk", "metadata")
	c.str(o, "taskId", path, false)
	c.str(o, "contextId", path, false)
	if a, ok := c.obj(o, "artifact", path, false); ok {
		c.artifact(a, path+".artifact")
	}
	c.boolean(o, "append", path, true)
	c.boolean(o, "lastChunk", path, true)
	c.obj(o, "metadata", path, true)
}

// streamItem checks one stream result and returns its 0.3 kind and object.
func (c *conf) streamItem(r map[string]any, path string) (string, map[string]any) {
	if c.v1() {
		if len(r) != 1 {
			c.bad(path, "a StreamResponse sets exactly one of task, message, statusUpdate, artifactUpdate; got %d members", len(r))
		}
		for k, name := range map[string]string{"task": "task", "message": "message", "statusUpdate": "status-update", "artifactUpdate": "artifact-update"} {
			if o, ok := r[k].(map[string]any); ok {
				c.event(name, o, path+"."+k)
				return name, o
			}
		}
		c.bad(path, "no StreamResponse payload in %v", r)
		return "", nil
	}
	k, _ := r["kind"].(string)
	if !c.event(k, r, path) {
		c.bad(path+".kind", "%q is not task, message, status-update or artifact-update", k)
	}
	return k, r
}

func (c *conf) event(kind string, o map[string]any, path string) bool {
	switch kind {
	case "task":
		c.task(o, path)
	case "message":
		c.message(o, path)
	case "status-update":
		c.statusUpdate(o, path)
	case "artifact-update":
		c.artifactUpdate(o, path)
	default:
		return false
	}
	return true
}

// sendResult checks message/send's result: a Task or a Message (0.3), a
// SendMessageResponse (1.0); it returns the task (nil for a message).
func (c *conf) sendResult(r map[string]any, path string) map[string]any {
	if c.v1() {
		if len(r) != 1 {
			c.bad(path, "a SendMessageResponse sets exactly one of task, message; got %v", r)
		}
		if t, ok := r["task"].(map[string]any); ok {
			c.task(t, path+".task")
			return t
		}
		if m, ok := r["message"].(map[string]any); ok {
			c.message(m, path+".message")
			return nil
		}
		c.bad(path, "no task or message in %v", r)
		return nil
	}
	if r["kind"] == "message" {
		c.message(r, path)
		return nil
	}
	c.task(r, path)
	return r
}

// A2A's own error codes (the spec's table, the SDK's A2A_ERROR_CODE).
var specCodes = []int{-32700, -32600, -32601, -32602, -32603, -32001, -32002, -32003, -32004, -32005, -32006, -32007, -32008, -32009}

// rpcError checks a JSON-RPC error object.
func (c *conf) rpcError(e map[string]any, path string) int {
	code, ok := e["code"].(float64)
	if !ok || code != float64(int(code)) {
		c.bad(path+".code", "want an integer, got %v", e["code"])
	}
	c.str(e, "message", path, false)
	if d, ok := e["data"]; ok {
		switch d.(type) {
		case map[string]any, []any:
		default:
			c.bad(path+".data", "want an object or an array, got %T", d)
		}
	}
	return int(code)
}

// envelope checks a JSON-RPC 2.0 response and returns its result or error.
func (c *conf) envelope(raw []byte, wantID any, path string) (result, rpcErr map[string]any) {
	var r map[string]any
	if err := json.Unmarshal(raw, &r); err != nil {
		c.bad(path, "not a JSON object: %q", raw)
		return nil, nil
	}
	if r["jsonrpc"] != "2.0" {
		c.bad(path+".jsonrpc", "%v, want \"2.0\"", r["jsonrpc"])
	}
	// The SDK's client compares ids with ===: the same type and value.
	if id, ok := r["id"]; !ok || id != wantID {
		c.bad(path+".id", "%v, want the request's %v", r["id"], wantID)
	}
	res, hasRes := r["result"]
	e, hasErr := r["error"]
	if hasRes == hasErr {
		c.bad(path, "a response holds exactly one of result and error: %s", raw)
		return nil, nil
	}
	if hasErr {
		em, ok := e.(map[string]any)
		if !ok {
			c.bad(path+".error", "want an object, got %T", e)
			return nil, nil
		}
		c.rpcError(em, path+".error")
		return nil, em
	}
	rm, ok := res.(map[string]any)
	if !ok {
		c.bad(path+".result", "want an object, got %T", res)
	}
	return rm, nil
}

func (c *conf) card(o map[string]any, path string) {
	c.only(o, path, "name", "description", "supportedInterfaces", "provider", "version", "documentationUrl", "capabilities",
		"securitySchemes", "securityRequirements", "defaultInputModes", "defaultOutputModes", "skills", "signatures", "iconUrl")
	for _, k := range []string{"name", "description", "version"} {
		c.str(o, k, path, false)
	}
	if caps, ok := c.obj(o, "capabilities", path, false); ok {
		c.only(caps, path+".capabilities", "streaming", "pushNotifications", "extensions", "extendedAgentCard")
		c.boolean(caps, "streaming", path+".capabilities", true)
		c.boolean(caps, "pushNotifications", path+".capabilities", true)
		exts, _ := c.arr(caps, "extensions", path+".capabilities", true)
		for i, e := range exts {
			em, _ := e.(map[string]any)
			c.str(em, "uri", fmt.Sprintf("%s.capabilities.extensions[%d]", path, i), false)
		}
	}
	c.strs(o, "defaultInputModes", path, false)
	c.strs(o, "defaultOutputModes", path, false)
	skills, _ := c.arr(o, "skills", path, false)
	for i, s := range skills {
		sm, _ := s.(map[string]any)
		sp := fmt.Sprintf("%s.skills[%d]", path, i)
		c.only(sm, sp, "id", "name", "description", "tags", "examples", "inputModes", "outputModes", "securityRequirements")
		for _, k := range []string{"id", "name", "description"} {
			c.str(sm, k, sp, false)
		}
		c.strs(sm, "tags", sp, false)
	}
	if c.v1() {
		ifs, _ := c.arr(o, "supportedInterfaces", path, false)
		if len(ifs) == 0 {
			c.bad(path+".supportedInterfaces", "no interface")
		}
		for i, raw := range ifs {
			f, _ := raw.(map[string]any)
			ip := fmt.Sprintf("%s.supportedInterfaces[%d]", path, i)
			c.only(f, ip, "url", "protocolBinding", "tenant", "protocolVersion")
			for _, k := range []string{"url", "protocolBinding", "protocolVersion"} {
				c.str(f, k, ip, false)
			}
		}
		return
	}
	c.str(o, "url", path, false)
	c.str(o, "protocolVersion", path, false)
	c.str(o, "preferredTransport", path, true)
}

// confCaller drives the door as a caller that checks everything it gets.
type confCaller struct {
	t  *testing.T
	c  *client
	cf *conf
	n  int // responses checked
}

func (k *confCaller) check(what string) {
	k.t.Helper()
	if len(k.cf.errs) > 0 {
		k.t.Errorf("%s (%s): a client would notice:\n  %s", what, k.cf.v, strings.Join(k.cf.errs, "\n  "))
		k.cf.errs = nil
	}
	k.n++
}

// rpc posts a request and checks the single JSON-RPC response.
func (k *confCaller) rpc(method string, params any) (result, rpcErr map[string]any) {
	k.t.Helper()
	body := k.c.body(method, params)
	resp, cancel := k.c.post(body, nil)
	defer cancel()
	return k.read(method, resp, k.c.n)
}

func (k *confCaller) read(method string, resp *http.Response, reqID int) (result, rpcErr map[string]any) {
	k.t.Helper()
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	result, rpcErr = k.cf.envelope(raw, float64(reqID), method)
	// An anonymous caller on a healthy door meets none of funduq's own
	// codes (authority, storage): only A2A's.
	if code, _ := rpcErr["code"].(float64); rpcErr != nil && !slices.Contains(specCodes, int(code)) {
		k.cf.bad(method+".error.code", "%v is not an A2A error code", rpcErr["code"])
	}
	k.check(method)
	return result, rpcErr
}

// wantCode checks an error answer carries code.
func (k *confCaller) wantCode(what string, e map[string]any, result map[string]any, code int) {
	k.t.Helper()
	if e == nil {
		k.t.Errorf("%s: got result %v, want error %d", what, result, code)
		return
	}
	if got, _ := e["code"].(float64); int(got) != code {
		k.t.Errorf("%s: error %v, want %d", what, e, code)
	}
}

// streamed reads a whole stream (or its error answer), checking each
// item, the ids, and the close: in 0.3 the last status update, and only
// it, is final; a stream that reports the task paused or ended says no
// more after it.
func (k *confCaller) streamed(what string, s *stream, reqID int) (items []item, lastState string) {
	k.t.Helper()
	finals := 0
	for i := 0; ; i++ {
		it, ok := s.next()
		if !ok {
			break
		}
		path := fmt.Sprintf("%s[%d]", what, i)
		if it.Resp.Error != nil {
			k.t.Errorf("%s: an error item %+v", path, it.Resp.Error)
			continue
		}
		raw, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": it.Resp.ID, "result": it.Resp.Result})
		res, _ := k.cf.envelope(raw, float64(reqID), path)
		kind, o := k.cf.streamItem(res, path)
		k.check(path)
		if finals > 0 {
			k.t.Errorf("%s: %s after the final status update", path, kind)
		}
		switch kind {
		case "task":
			lastState = stateOf(o)
		case "status-update":
			lastState = stateOf(o)
			if f, _ := o["final"].(bool); f {
				finals++
			}
		}
		items = append(items, item{kind, o, it.ID})
		// Every item is about the stream's one task and its context.
		idKey := map[bool]string{true: "id", false: "taskId"}[kind == "task"]
		if len(items) > 1 && o != nil && (o[idKey] != items[0].obj["id"] || o["contextId"] != items[0].obj["contextId"]) {
			k.t.Errorf("%s: about task %v on %v, the stream's is %v on %v", path, o[idKey], o["contextId"], items[0].obj["id"], items[0].obj["contextId"])
		}
	}
	if len(items) == 0 {
		k.t.Errorf("%s: an empty stream", what)
		return nil, ""
	}
	if k.cf.v1() {
		return items, lastState
	}
	last := items[len(items)-1]
	// The 0.3 client knows a stream is over by its final status update.
	if f, _ := last.obj["final"].(bool); last.kind != "status-update" || !f {
		k.t.Errorf("%s: the stream closed after %s %v, not a status update with final: true", what, last.kind, last.obj)
	}
	return items, lastState
}

// confScript is a seeded AG-UI run as a raw-wire provider plays it.
type confScript struct {
	name  string
	evs   []string // after RUN_STARTED, before the end
	end   string   // "finish", "error", "interrupt", "cancel", "none" (no RUN_FINISHED: a cut run)
	final string   // the 0.3 state the task ends in
}

func confRun(rng *rand.Rand, thread, runID string) confScript {
	var evs []string
	open := false // a tool call left unanswered: an ask (seed 001)
	for m := range rng.IntN(3) {
		id := fmt.Sprintf("m%d", m)
		evs = append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_START","messageId":%q,"role":"assistant"}`, id))
		for d := range rng.IntN(4) {
			evs = append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":"chunk %d \u00e9 "}`, id, d))
		}
		evs = append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_END","messageId":%q}`, id))
		if rng.IntN(2) == 0 {
			tc := fmt.Sprintf("tc%d", m)
			evs = append(evs, fmt.Sprintf(`{"type":"TOOL_CALL_START","toolCallId":%q,"toolCallName":"lookup","parentMessageId":%q}`, tc, id),
				fmt.Sprintf(`{"type":"TOOL_CALL_ARGS","toolCallId":%q,"delta":"{\"q\":1}"}`, tc),
				fmt.Sprintf(`{"type":"TOOL_CALL_END","toolCallId":%q}`, tc))
			if rng.IntN(2) == 0 {
				evs = append(evs, fmt.Sprintf(`{"type":"TOOL_CALL_RESULT","messageId":"res-%s","toolCallId":%q,"content":"42","role":"tool"}`, tc, tc))
			} else {
				open = true
			}
		}
	}
	s := confScript{evs: evs}
	switch rng.IntN(5) {
	case 0:
		s.end, s.final = "error", "failed"
		s.evs = append(s.evs, `{"type":"RUN_ERROR","message":"it broke","code":"boom"}`)
	case 1:
		s.end, s.final = "interrupt", "input-required"
		s.evs = append(s.evs, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"ok?","reason":"confirm"}]}}`, thread, runID))
	case 2:
		s.end, s.final = "cancel", "canceled"
	default:
		s.end, s.final = "finish", "completed"
		if open {
			// Finished asking: the run pauses on the tool call (seed
			// 001, "Finish asking"; design.md D1).
			s.final = "input-required"
		}
		s.evs = append(s.evs, runFinished(thread, runID))
	}
	s.name = fmt.Sprintf("%s after %d events", s.end, len(s.evs))
	return s
}

// TestOutsideResponsesConformToTheSDKTypes plays seeded AG-UI runs (text in
// chunks, tool calls, RUN_ERROR, an interrupt with an outstanding ask, a
// cancel by the caller, empty runs) through the door in both versions and
// checks every answer a caller gets — message/send blocking and not, the
// stream, tasks/get with historyLength 0, 1 and absent, tasks/cancel,
// tasks/resubscribe, the agent card, and a second caller's and a
// stranger's refusals — against the SDK's types. FUNDUQ_A2ACONF_SEEDS
// picks the seeds (default 1-4).
func TestOutsideResponsesConformToTheSDKTypes(t *testing.T) {
	seeds.Run(t, "FUNDUQ_A2ACONF_SEEDS", "1-4", func(t *testing.T, seed uint64) {
		h := nodetest.Start(t, nil)
		p := h.Connect(0xe1, nil)
		p.Register("echo")
		srv := startDoor(t, h, nil)
		for _, v := range []string{"", "1.0"} {
			t.Run("v="+v, func(t *testing.T) { a2aConformance(t, h, p, srv.URL, v, rand.New(rand.NewPCG(seed, 0xc0f))) })
		}
	})
}

func a2aConformance(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, base, v string, rng *rand.Rand) {
	url := base + "/a2a/" + p.Key + "/echo"
	mk := func() *confCaller {
		return &confCaller{t: t, c: &client{t: t, url: url, version: v}, cf: &conf{v: v}}
	}
	k, second, stranger := mk(), mk(), mk()

	// The agent card.
	req, _ := http.NewRequest(http.MethodGet, url+"/.well-known/agent-card.json", nil)
	if v != "" {
		req.Header.Set(a2a.VersionHeader, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var card map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&card); err != nil {
		t.Fatalf("agent card: %v", err)
	}
	resp.Body.Close()
	k.cf.card(card, "card")
	k.check("agent card")

	for turn := range 1 + rng.IntN(3) {
		mode := []string{"blocking", "non-blocking", "stream"}[rng.IntN(3)]
		msg := k.c.message(fmt.Sprintf("conf-%s-%d-%d", v, turn, rng.Uint64()), "hello", nil)
		params := map[string]any{"message": msg}
		switch {
		case mode == "non-blocking" && v == "1.0":
			params["configuration"] = map[string]any{"returnImmediately": true}
		case mode == "non-blocking":
			params["configuration"] = map[string]any{"blocking": false}
		}
		var (
			st      *stream
			blocked <-chan *http.Response
			id      string
			stID    int
		)
		switch mode {
		case "stream":
			st = k.c.stream(k.c.body(methodOf(v, "message/stream"), params), nil)
			stID = k.c.n
		case "blocking":
			blocked = k.c.postAsync(k.c.body(methodOf(v, "message/send"), params), nil)
			stID = k.c.n
		default:
			res, e := k.rpc(methodOf(v, "message/send"), params)
			if e != nil {
				t.Fatalf("non-blocking send: %v", e)
			}
			if task := k.cf.sendResult(res, "send"); task != nil {
				id, _ = task["id"].(string)
			}
			k.check("non-blocking send")
		}
		f := p.Offer()
		if id != "" && id != f.RunID {
			t.Fatalf("task %s, offered %s", id, f.RunID)
		}
		id = f.RunID
		s := confRun(rng, *f.ThreadID, id)
		t.Logf("turn %d: %s, %s", turn, mode, s.name)
		p.Accept(id)
		p.Event(id, runStarted(*f.ThreadID, id))
		for _, ev := range s.evs {
			p.Event(id, ev)
		}
		if s.end == "cancel" {
			h.WaitStatus(id, run.Running)
			res, e := k.rpc(methodOf(v, "tasks/cancel"), map[string]any{"id": id})
			if e != nil {
				t.Fatalf("cancel of a running task: %v", e)
			}
			k.cf.task(res, "cancel")
			k.check("tasks/cancel")
			var cf wire.Cancel
			p.Expect(wire.TypeCancel, &cf)
		}
		p.Finish(id)
		h.WaitStatus(id, map[string]run.Status{"completed": run.Completed, "failed": run.Failed,
			"input-required": run.InputRequired, "canceled": run.Cancelled}[s.final])

		want := wireState(v, s.final)
		switch mode {
		case "stream":
			if _, last := k.streamed("message/stream", st, stID); last != want {
				t.Errorf("message/stream ended in %q, want %q", last, want)
			}
		case "blocking":
			resp := <-blocked
			res, e := k.read("blocking send", resp, stID)
			if e != nil {
				t.Fatalf("blocking send: %v", e)
			}
			if task := k.cf.sendResult(res, "send"); task != nil && stateOf(task) != want {
				t.Errorf("blocking send ended in %q, want %q", stateOf(task), want)
			}
			k.check("blocking send")
		}

		// tasks/get, with historyLength absent, 0 and 1.
		for _, hl := range []any{nil, 0, 1} {
			params := map[string]any{"id": id}
			if hl != nil {
				params["historyLength"] = hl
			}
			res, e := k.rpc(methodOf(v, "tasks/get"), params)
			if e != nil {
				t.Fatalf("tasks/get %v: %v", hl, e)
			}
			k.cf.task(res, "get")
			k.check(fmt.Sprintf("tasks/get historyLength=%v", hl))
			if res["id"] != id || res["contextId"] != *f.ThreadID {
				t.Errorf("tasks/get %s: task %v on %v", id, res["id"], res["contextId"])
			}
			hist, _ := res["history"].([]any)
			for i, m := range hist {
				mm, _ := m.(map[string]any)
				if c, ok := mm["contextId"]; ok && c != *f.ThreadID {
					t.Errorf("tasks/get: history[%d] on context %v, the task's is %s", i, c, *f.ThreadID)
				}
			}
			if n, ok := hl.(int); ok {
				if hist, _ := res["history"].([]any); len(hist) > n {
					t.Errorf("tasks/get historyLength=%d: %d messages", n, len(hist))
				}
			}
			if stateOf(res) != want {
				t.Errorf("tasks/get: %q, want %q", stateOf(res), want)
			}
		}

		// The task has stopped: cancel is -32002; a resubscribe to an
		// ended task is -32004 and to a paused one a stream that says so.
		res, e := second.rpc(methodOf(v, "tasks/cancel"), map[string]any{"id": id})
		second.wantCode("a second caller's cancel of a stopped task", e, res, a2a.CodeTaskNotCancelable)
		rs, cancel := second.c.post(second.c.body(methodOf(v, "tasks/resubscribe"), map[string]any{"id": id}), nil)
		subID := second.c.n
		if strings.HasPrefix(rs.Header.Get("Content-Type"), "text/event-stream") {
			sub := &stream{t: t, resp: rs, br: bufio.NewReader(rs.Body), cancel: cancel}
			if s.final != "input-required" {
				t.Errorf("a resubscribe to a %s task streamed", s.final)
			}
			if _, last := second.streamed("resubscribe", sub, subID); last != want {
				t.Errorf("resubscribe ended in %q, want %q", last, want)
			}
			rs.Body.Close()
		} else {
			res, e := second.read("resubscribe", rs, subID)
			second.wantCode("a resubscribe to an ended task", e, res, a2a.CodeUnsupportedOperation)
		}
		cancel()

		// A second caller's message naming the ended task is the
		// context's next task (a new id: an ended task never restarts).
		if s.final != "input-required" {
			m := second.c.message(fmt.Sprintf("again-%s-%d", v, rng.Uint64()), "more", map[string]any{"taskId": id})
			cfg := map[string]any{"blocking": false}
			if v == "1.0" {
				cfg = map[string]any{"returnImmediately": true}
			}
			res, e := second.rpc(methodOf(v, "message/send"), map[string]any{"message": m, "configuration": cfg})
			if e != nil {
				t.Fatalf("a message naming the ended task: %v", e)
			}
			next := second.cf.sendResult(res, "next")
			second.check("a message naming the ended task")
			f2 := p.Offer()
			if next["id"] != f2.RunID || f2.RunID == id || next["contextId"] != *f.ThreadID {
				t.Errorf("a message naming ended task %s: task %v on %v, offered %s", id, next["id"], next["contextId"], f2.RunID)
			}
			p.Accept(f2.RunID)
			p.Complete(f2.RunID, *f2.ThreadID)
			h.WaitStatus(f2.RunID, run.Completed)
		} else {
			// Answer the ask so the context is free for the next turn.
			got := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
			m := second.c.message(fmt.Sprintf("answer-%s-%d", v, rng.Uint64()), "yes", map[string]any{"taskId": id})
			res, e := second.rpc(methodOf(v, "message/send"), map[string]any{"message": m})
			if e != nil {
				t.Fatalf("answer: %v", e)
			}
			second.cf.sendResult(res, "answer")
			second.check("answer")
			recv(t, got, "the answer offered")
		}

		// A stranger holding an id nobody issued.
		for _, m := range []string{"tasks/get", "tasks/cancel"} {
			res, e := stranger.rpc(methodOf(v, m), map[string]any{"id": unknownTask})
			stranger.wantCode("a stranger's "+m, e, res, a2a.CodeTaskNotFound)
		}
		res, e = stranger.rpc(methodOf(v, "tasks/resubscribe"), map[string]any{"id": unknownTask})
		stranger.wantCode("a stranger's resubscribe", e, res, a2a.CodeTaskNotFound)
	}
	t.Logf("%d answers checked", k.n+second.n+stranger.n)
}

// The checker itself catches what a client would notice (so a green
// conformance run is not a vacuous one).
func TestConformanceCheckerCatchesMismatches(t *testing.T) {
	parse := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	goodTask03 := `{"kind":"task","id":"t","contextId":"c","status":{"state":"completed"},"history":[]}`
	goodTask10 := `{"id":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"},"history":[]}`
	for _, tc := range []struct {
		v, doc, what string
		bad          bool
		check        func(*conf, map[string]any)
	}{
		{"", goodTask03, "task", false, nil},
		{"1.0", goodTask10, "task", false, nil},
		{"", `{"id":"t","contextId":"c","status":{"state":"completed"}}`, "task without kind", true, nil},
		{"", `{"kind":"task","id":"t","contextId":"c","status":{"state":"done"}}`, "unknown state", true, nil},
		{"1.0", `{"id":"t","contextId":"c","status":{"state":"completed"}}`, "0.3 state in 1.0", true, nil},
		{"1.0", `{"id":"t","contextId":"c","status":{"state":"TASK_STATE_UNSPECIFIED"}}`, "unspecified state", true, nil},
		{"", `{"kind":"task","id":"t","contextId":"c"}`, "no status", true, nil},
		{"1.0", `{"kind":"task","id":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"}}`, "kind in 1.0", true, nil},
		{"", `{"kind":"task","id":"t","contextId":"c","status":{"state":"working"},"history":[{"kind":"message","messageId":"m","role":"assistant","parts":[]}]}`, "bad role", true, nil},
		{"", `{"kind":"task","id":"t","contextId":"c","status":{"state":"working"},"artifacts":[{"artifactId":"a","parts":[{"text":"x"}]}]}`, "part without kind", true, nil},
		{"1.0", `{"id":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING"},"artifacts":[{"artifactId":"a","parts":[{"kind":"text","text":"x"}]}]}`, "part with kind in 1.0", true, nil},
		{"1.0", `{"id":"t","contextId":"c","status":{"state":"TASK_STATE_WORKING","timestamp":"yesterday"}}`, "bad timestamp", true, nil},
		{"", `{"kind":"status-update","taskId":"t","contextId":"c","status":{"state":"completed"}}`, "update without final", true,
			func(c *conf, o map[string]any) { c.streamItem(o, "item") }},
		{"", `{"kind":"status-update","taskId":"t","contextId":"c","status":{"state":"completed"},"final":true}`, "update", false,
			func(c *conf, o map[string]any) { c.streamItem(o, "item") }},
		{"1.0", `{"statusUpdate":{"taskId":"t","contextId":"c","status":{"state":"TASK_STATE_COMPLETED"}},"task":{}}`, "two payloads", true,
			func(c *conf, o map[string]any) { c.streamItem(o, "item") }},
		{"", `{"kind":"artifact-update","taskId":"t","contextId":"c","artifact":{"parts":[]}}`, "artifact without id", true,
			func(c *conf, o map[string]any) { c.streamItem(o, "item") }},
		{"", `{"code":"x","message":"m"}`, "string code", true, func(c *conf, o map[string]any) { c.rpcError(o, "error") }},
		{"", `{"name":"a","description":"","version":"1","capabilities":{},"defaultInputModes":[],"defaultOutputModes":[],"skills":[]}`,
			"0.3 card without url", true, func(c *conf, o map[string]any) { c.card(o, "card") }},
	} {
		c := &conf{v: tc.v}
		o := parse(tc.doc)
		if tc.check != nil {
			tc.check(c, o)
		} else {
			c.task(o, "task")
		}
		if got := len(c.errs) > 0; got != tc.bad {
			t.Errorf("%s (%q): reported %v, want a report %v", tc.what, tc.v, c.errs, tc.bad)
		}
	}
}

// The agent card of a registration with card extras (skills, extensions)
// and interjections, in both versions, as the SDK types it. A skill
// written in 0.3's shape (its "security") reaches a 1.0 caller in 1.0's
// ("securityRequirements"): a strict ProtoJSON reader refuses a card with
// a member its AgentSkill does not declare.
func TestOutsideAgentCardConformsInBothVersions(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.SendRaw(`{"type":"register","agents":[{"name":"carded","description":"d","takesInterjections":true,"agentCardExtra":{` +
		`"version":"2.1.0","skills":[{"id":"s1","name":"Search","description":"finds","tags":["a"],"examples":["x"],"inputModes":["text/plain"]},{"id":"s2","security":[{"oauth":["read"]}]}],` +
		`"extensions":[{"uri":"https://example.com/ext","required":false}]}}]}`)
	var r wire.Registered
	p.Expect(wire.TypeRegistered, &r)
	srv := startDoor(t, h, nil)
	for _, v := range []string{"", "0.3", "1.0"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/a2a/"+p.Key+"/carded/.well-known/agent-card.json", nil)
		if v != "" {
			req.Header.Set(a2a.VersionHeader, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var card map[string]any
		err = json.NewDecoder(resp.Body).Decode(&card)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("card %q: %v", v, err)
		}
		cv := v
		if v == "0.3" {
			cv = ""
		}
		c := &conf{v: cv}
		c.card(card, "card")
		if len(c.errs) > 0 {
			t.Errorf("card (A2A-Version %q): a client would notice:\n  %s", v, strings.Join(c.errs, "\n  "))
		}
		skills, _ := card["skills"].([]any)
		if len(skills) != 2 {
			t.Fatalf("card (A2A-Version %q): skills %v", v, card["skills"])
		}
		want := `[{"oauth":["read"]}]`
		key := "security"
		if cv == "1.0" {
			want, key = `[{"schemes":{"oauth":{"list":["read"]}}}]`, "securityRequirements"
		}
		if got := mustJSON(skills[1].(map[string]any)[key]); got != want {
			t.Errorf("card (A2A-Version %q): skill %s %s, want %s", v, key, got, want)
		}
	}
}
