package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// IdempotencyHeader: a retried POST repeating it returns the original run
// (D13), like the A2A messageId does.
const IdempotencyHeader = door.IdempotencyHeader

// messageIDKeyPrefix scopes an A2A messageId used as the agent-wide
// idempotency key of a send that opens a new context (a messageId on a
// known context is checked per thread instead).
const messageIDKeyPrefix = "a2a-message:"

// InboundMessage is an A2A message as the door reads it.
type InboundMessage struct {
	MessageID        string
	ContextID        string
	TaskID           string
	Role             string // AG-UI role: "user" or "assistant"
	Text             string // the text parts, concatenated
	Metadata         json.RawMessage
	ReferenceTaskIDs []string
}

// SendParams are message/send's (and message/stream's) params.
type SendParams struct {
	Message       InboundMessage
	MessageRaw    json.RawMessage // params.message as sent (hashed for retries)
	Metadata      json.RawMessage // the caller's bag
	Blocking      bool
	HistoryLength int // -1: absent
}

// ParseSendParams reads the params of a send. Errors are *RPCError: -32602
// for a wrong shape, -32005 for a part that is not text.
func ParseSendParams(params json.RawMessage) (SendParams, *RPCError) {
	p := SendParams{Blocking: true, HistoryLength: -1}
	var obj map[string]json.RawMessage
	if json.Unmarshal(params, &obj) != nil {
		return p, rpcErr(CodeInvalidParams, "params must be an object")
	}
	if raw, ok := obj["metadata"]; ok && firstByte(raw) != 'n' {
		if firstByte(raw) != '{' {
			return p, rpcErr(CodeInvalidParams, "params.metadata must be an object")
		}
		p.Metadata = raw
	}
	if raw, ok := obj["configuration"]; ok && firstByte(raw) != 'n' {
		var cfg map[string]json.RawMessage
		if firstByte(raw) != '{' || json.Unmarshal(raw, &cfg) != nil {
			return p, rpcErr(CodeInvalidParams, "params.configuration must be an object")
		}
		for _, key := range []string{"blocking", "returnImmediately"} {
			var b bool
			if v := cfg[key]; len(v) > 0 && firstByte(v) != 'n' {
				if json.Unmarshal(v, &b) != nil {
					return p, rpcErr(CodeInvalidParams, "params.configuration.%s must be a boolean", key)
				}
				if key == "blocking" && !b || key == "returnImmediately" && b {
					p.Blocking = false
				}
			}
		}
		// A push config asks for webhooks this door does not send (the
		// card says so): refused, never taken and dropped (design.md
		// §The doors). Each version's name is read.
		for _, key := range []string{"pushNotificationConfig", "taskPushNotificationConfig", "pushNotification"} {
			if v := cfg[key]; len(v) > 0 && firstByte(v) != 'n' {
				return p, rpcErr(CodePushNotificationNotSupported,
					"params.configuration.%s: this agent does not send push notifications; poll or stream the task instead", key)
			}
		}
		// Output modes are taken and not acted on (the door answers in
		// text, as A2A lets an agent), but the wrong shape is refused like
		// any other member's, not dropped.
		if v := cfg["acceptedOutputModes"]; len(v) > 0 && firstByte(v) != 'n' {
			var modes []string
			if firstByte(v) != '[' || json.Unmarshal(v, &modes) != nil {
				return p, rpcErr(CodeInvalidParams, "params.configuration.acceptedOutputModes must be an array of media type strings")
			}
		}
		// A count as ProtoJSON writes it (readCount).
		n, ok, e := readCount(cfg["historyLength"], "params.configuration.historyLength")
		if e != nil {
			return p, e
		}
		if ok {
			p.HistoryLength = n
		}
	}
	raw, ok := obj["message"]
	if !ok || firstByte(raw) != '{' {
		return p, rpcErr(CodeInvalidParams, "params.message must be an A2A Message object")
	}
	m, e := parseMessage(raw)
	if e != nil {
		return p, e
	}
	p.Message, p.MessageRaw = m, raw
	return p, nil
}

func parseMessage(raw json.RawMessage) (InboundMessage, *RPCError) {
	var m InboundMessage
	// Relayed as sent or not at all (door.RefuseUnstorable): its text is
	// decoded, and a lone surrogate escape would reach the agent as
	// U+FFFD; its metadata is refused alike, as the request's is.
	if e := door.RefuseUnstorable(raw, "params.message"); e != nil {
		return m, &RPCError{Code: CodeInvalidParams, Message: e.Message, Data: map[string]any{"reason": e.Code}}
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return m, rpcErr(CodeInvalidParams, "params.message must be an object")
	}
	str := func(key string, required bool) (string, *RPCError) {
		v, ok := obj[key]
		if !ok || firstByte(v) == 'n' {
			if required {
				return "", rpcErr(CodeInvalidParams, "params.message.%s is required (a non-empty string)", key)
			}
			return "", nil
		}
		var s string
		if firstByte(v) != '"' || json.Unmarshal(v, &s) != nil || (required && s == "") {
			return "", rpcErr(CodeInvalidParams, "params.message.%s must be a string", key)
		}
		return s, nil
	}
	// A discriminator naming another object (v0.3's kind) is not a
	// message; one without it is (v1.0 has none).
	if k, ok := obj["kind"]; ok && firstByte(k) != 'n' {
		var kind string
		if json.Unmarshal(k, &kind) != nil || kind != "message" {
			return m, rpcErr(CodeInvalidParams, "params.message.kind must be \"message\"")
		}
	}
	var e *RPCError
	if m.MessageID, e = str("messageId", true); e != nil {
		return m, e
	}
	// Kept to recognise a retry (door.MaxCallerID).
	if len(m.MessageID) > door.MaxCallerID {
		return m, rpcErr(CodeInvalidParams, "params.message.messageId is %d bytes; at most %d are accepted", len(m.MessageID), door.MaxCallerID)
	}
	if m.ContextID, e = str("contextId", false); e != nil {
		return m, e
	}
	if m.TaskID, e = str("taskId", false); e != nil {
		return m, e
	}
	role, e := str("role", true)
	if e != nil {
		return m, e
	}
	switch strings.ToLower(role) {
	case "agent", "role_agent":
		m.Role = "assistant"
	case "user", "role_user":
		m.Role = "user"
	default:
		// A2A knows two roles; anything else is refused, not taken for the
		// user's. The refusal names what came (its first 64 characters): a
		// client library that mangled the role (@a2a-js/sdk 1.x sends
		// "UNRECOGNIZED" for a 0.3 "user") shows there.
		return m, rpcErr(CodeInvalidParams, "params.message.role %.64q is not an A2A role: it must be \"user\" or \"agent\" (ROLE_USER or ROLE_AGENT)", role)
	}
	if v, ok := obj["metadata"]; ok && firstByte(v) != 'n' {
		if firstByte(v) != '{' {
			return m, rpcErr(CodeInvalidParams, "params.message.metadata must be an object")
		}
		m.Metadata = v
	}
	if v, ok := obj["referenceTaskIds"]; ok && firstByte(v) != 'n' {
		if json.Unmarshal(v, &m.ReferenceTaskIDs) != nil {
			return m, rpcErr(CodeInvalidParams, "params.message.referenceTaskIds must be an array of strings")
		}
	}
	var parts []json.RawMessage
	if v, ok := obj["parts"]; !ok || firstByte(v) != '[' || json.Unmarshal(v, &parts) != nil || len(parts) == 0 {
		return m, rpcErr(CodeInvalidParams, "params.message.parts must be a non-empty array of parts")
	}
	var bad []string
	var text strings.Builder
	for i, raw := range parts {
		var p map[string]json.RawMessage
		if firstByte(raw) != '{' || json.Unmarshal(raw, &p) != nil {
			return m, rpcErr(CodeInvalidParams, "params.message.parts[%d] must be an object", i)
		}
		var s string
		if t, ok := p["text"]; ok && firstByte(t) == '"' && json.Unmarshal(t, &s) == nil {
			text.WriteString(s)
			continue
		}
		k := ""
		for _, key := range []string{"kind", "type"} {
			if v, ok := p[key]; ok {
				_ = json.Unmarshal(v, &k)
				break
			}
		}
		if k == "" {
			for _, key := range []string{"file", "data", "raw", "url"} {
				if _, ok := p[key]; ok {
					k = key
					break
				}
			}
		}
		// A text part (by its kind, or by a text member) without a string
		// text is a malformed text part, not an unsupported kind: saying
		// "only text parts are supported; got text" would tell the caller
		// nothing it can fix.
		if _, hasText := p["text"]; k == "text" || k == "" && hasText {
			return m, rpcErr(CodeInvalidParams, "params.message.parts[%d].text must be a string", i)
		}
		if k == "" {
			k = "unknown"
		}
		bad = append(bad, k)
	}
	if len(bad) > 0 {
		return m, &RPCError{Code: CodeContentTypeNotSupported,
			Message: "only text parts are supported; got " + strings.Join(bad, ", "),
			Data:    map[string]any{"unsupported": bad}}
	}
	m.Text = text.String()
	return m, nil
}

// aguiMessage is the A2A message as the AG-UI message the provider gets.
func (m InboundMessage) aguiMessage() json.RawMessage {
	obj := map[string]any{"role": m.Role, "content": m.Text}
	if m.Metadata != nil {
		obj["metadata"] = m.Metadata
	}
	b, _ := json.Marshal(obj)
	return b
}

// accepted is what a send resolved to: the run to answer about, and the
// seq after which its events are new to this caller.
type accepted struct {
	run   store.Run
	after int
	fresh bool // this request wrote the run (door.Tail.Fresh)
	// msgs are the caller's messages this request recorded with the run
	// it wrote (fresh): with the agent's the end recorded, the run's.
	msgs []store.Message
}

// callerMessages are the caller's messages this request wrote with its
// run, as a task view reads them.
func (acc accepted) callerMessages() []store.RunMessage {
	msgs := make([]store.RunMessage, 0, len(acc.msgs))
	for _, m := range acc.msgs {
		msgs = append(msgs, store.RunMessage{MessageID: m.MessageID, Message: m.Message, Origin: "caller"})
	}
	return msgs
}

func (c *call) send(streaming bool) {
	p, perr := ParseSendParams(c.req.Params)
	if perr != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, perr)
		return
	}
	// A retried stream resumes where its dropped one ended (D9), as an
	// SSE client says with Last-Event-ID; read before anything is written.
	resume := -1
	if streaming {
		if resume, perr = c.lastEventID(); perr != nil {
			c.h.writeRPC(c.w, c.req.ID, nil, perr)
			return
		}
	}
	// The request's budget; each of its storage calls has a door.Step of
	// it, so one that meets a hung database costs the caller one bound.
	ctx, cancel := context.WithTimeout(c.r.Context(), 3*door.StepBound(c.r.Context()))
	acc, err := c.accept(ctx, p)
	if errors.Is(err, store.ErrThreadGone) {
		// Retention deleted the context, or a referenced task's, between
		// its check and the write: checked again, it is unknown, as to a
		// request arriving now (design.md §The doors).
		acc, err = c.accept(ctx, p)
	}
	cancel()
	if err != nil {
		c.fail(err)
		return
	}
	if streaming {
		after := acc.after
		if !acc.fresh && resume > after {
			// Only on a task this request did not make: a new task's ids
			// are not the ones the client counted. Past the run's last
			// event reads as that event, as on tasks/resubscribe.
			after = max(after, min(resume, acc.run.LastSeq))
		}
		if acc.fresh {
			c.wrote = &acc
		}
		c.stream(acc.run, after, p.HistoryLength)
		return
	}
	var view taskView
	if v, rn, settled := c.waitRecord(acc, p.Blocking); settled {
		view = v
	} else {
		ctx, cancel = context.WithTimeout(c.r.Context(), 2*door.StepBound(c.r.Context()))
		view, _, err = c.h.project(ctx, rn, -1)
		cancel()
		if err != nil && acc.fresh && door.Unavailable(err) && c.r.Context().Err() == nil {
			// The task this request just wrote, its storage gone since:
			// answered as written, not "storage unavailable, retry" about
			// a task that exists and runs, whose retry by an anonymous
			// caller would make a second one (as a stream shows it,
			// design.md §Doors under storage faults).
			c.h.log.WarnContext(ctx, "a2a: reading the task just written failed; answering it as written", "run_id", rn.RunID, "err", err)
			view, err = newFold(-1, false).view(rn, acc.callerMessages()), nil
		}
		if err != nil {
			c.fail(err)
			return
		}
	}
	view.History = applyHistoryLength(view.History, p.HistoryLength)
	c.result(sendResult(c.v, view))
}

// maxLineageRefs bounds the referenced tasks one message makes the door
// look up for its lineage (two reads each): ids past it are not weighed
// (docs/design.md §The doors).
const maxLineageRefs = 8

// lineage is the thread a new context records as its parent: the thread
// of the first referenced task, among the first maxLineageRefs, that the
// caller may read (its thread is unbound, or the caller is one of its
// parties or heads it). A task the caller may not read is skipped as an
// unknown one is: an id is not a credential (D16), and a parent is kept by
// retention while it has children, so a stranger's reference would keep
// another caller's conversation alive.
func (c *call) lineage(ctx context.Context, refs []string, callerKey, head string) (string, error) {
	if len(refs) > maxLineageRefs {
		refs = refs[:maxLineageRefs]
	}
	for _, id := range refs {
		thread, err := c.readableThread(ctx, id, callerKey, head)
		if thread != "" || err != nil {
			return thread, err
		}
	}
	return "", nil
}

// readableThread is the thread of task id when the caller may read it,
// "" when the task is unknown or not the caller's to read.
func (c *call) readableThread(ctx context.Context, id, callerKey, head string) (string, error) {
	if id == "" {
		return "", nil
	}
	st := c.h.o.Store
	sctx, cancel := door.Step(ctx)
	ref, err := st.GetRun(sctx, id)
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	sctx, cancel = door.Step(ctx)
	th, err := st.GetThread(sctx, ref.ThreadID)
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if !door.MayRead(th, door.Viewer{Caller: callerKey}) && (th.HeadKey == "" || head != th.HeadKey) {
		return "", nil
	}
	return ref.ThreadID, nil
}

func notFoundTask(id string) error {
	return door.Refuse(http.StatusNotFound, door.CodeTaskNotFound, "no task %s for this agent", id)
}

// accept runs the send's checks in order (design.md §The doors) and
// writes the run, or reopens the paused one the message answers.
func (c *call) accept(ctx context.Context, p SendParams) (accepted, error) {
	h, agent, msg := c.h, c.agent, p.Message
	st := h.o.Store

	// The caller's bag: the request metadata. A KYOK opt-in's context is
	// for the LLM provider alone: it leaves the bag before anything is
	// stored or relayed, and travels sealed with the run.
	bag, err := door.ReadBag(p.Metadata, "metadata")
	if err != nil {
		return accepted{}, err
	}
	p.Metadata = bag.Raw
	if err := door.CheckKyokOptIn(ctx, st, bag.Kyok); err != nil {
		return accepted{}, err
	}

	// The caller: an actor chain needs its presenter (D12); the caller key
	// also scopes the request's idempotency keys (D17).
	caller, err := door.ReadCaller(c.r, c.body, h.o.AuthorizedKey, h.o.Now(), bag)
	if err != nil {
		return accepted{}, err
	}
	callerKey, chain, head := caller.Key, caller.Chain, caller.Head()

	parentThread, err := c.lineage(ctx, msg.ReferenceTaskIDs, callerKey, head)
	if err != nil {
		return accepted{}, err
	}
	// A named task must be this agent's; it fixes the context.
	var task *store.Run
	var taskThread store.Thread
	if msg.TaskID != "" {
		t, th, err := c.task(ctx, msg.TaskID)
		if err != nil {
			return accepted{}, err
		}
		// A stranger naming a bound task (to answer it, say) learns nothing:
		// exactly an unknown task's answer (D16).
		if !door.MayWrite(th, agent, head) && !door.MayRead(th, door.Viewer{Caller: callerKey}) {
			return accepted{}, notFoundTask(msg.TaskID)
		}

		taskThread = th
		if msg.ContextID != "" && msg.ContextID != t.ThreadID {
			return accepted{}, door.Refuse(http.StatusUnprocessableEntity, door.CodeInvalidRunInput,
				"task %s belongs to context %s, not %s", t.RunID, t.ThreadID, msg.ContextID)
		}
		msg.ContextID = t.ThreadID
		task = &t
	}

	// The context: A2A assigns context ids, so an unknown one is refused,
	// never replaced.
	var thread *store.Thread
	if msg.ContextID != "" {
		sctx, cancel := door.Step(ctx)
		t, err := st.GetThread(sctx, msg.ContextID)
		cancel()
		if errors.Is(err, store.ErrNotFound) {
			return accepted{}, door.Refuse(http.StatusNotFound, door.CodeThreadNotFound,
				"context %q is unknown: omit contextId to open a new one (contexts are assigned by the server)", msg.ContextID)
		}
		if err != nil {
			return accepted{}, err
		}
		if err := door.CheckThread(t, agent, head, "context", " (its responsibility segment)"); err != nil {
			return accepted{}, err
		}
		thread = &t
	}

	// An interjection declaration must address the thread's running run.
	addressed := ""
	if raw, ok := bag.Obj[AddressedRunIDKey]; ok && firstByte(raw) != 'n' {
		if firstByte(raw) != '"' || json.Unmarshal(raw, &addressed) != nil || addressed == "" {
			return accepted{}, door.Refuse(http.StatusUnprocessableEntity, door.CodeInvalidRunInput,
				"metadata[%q] must be the id of the context's running task", AddressedRunIDKey)
		}
		if thread == nil {
			return accepted{}, door.Refuse(http.StatusUnprocessableEntity, door.CodeInvalidRunInput,
				"an interjection must name its context (contextId): it addresses that context's running task")
		}
	}

	// A retried send returns the original task (D13).
	idem, err := door.IdempotencyKey(c.r)
	if err != nil {
		return accepted{}, err
	}
	// Keys belong to their caller (D17, door.Probe): a messageId within
	// its context, or — opening a new context — within a known caller and
	// the same message, so another caller's message with the same id is
	// its own.
	hash := identity.SHA256Hex(append(append(append([]byte(nil), p.MessageRaw...), 0), p.Metadata...))
	// On a context the messageId is stored and matched within its caller
	// too (door.IdempotencyScope): callers sharing an unbound context each
	// have their own ids, so another caller's message under the same id is
	// its own task, never a 422 about a key it did not use nor the other
	// caller's task. An anonymous caller's is matched with the request's
	// hash, as before.
	requestID := door.IdempotencyScope(callerKey, msg.MessageID)
	firstMessage := messageIDKeyPrefix + msg.MessageID + ":" + hash
	probe := door.Probe(agent, thread, caller, idem, requestID, hash, firstMessage)
	// A retry of a presenter's whose proof went stale is refused, not run
	// again as an anonymous caller's (design.md §The doors).
	if err := door.RefuseStaleRetry(ctx, st, caller, func(c door.Caller) store.NewRun {
		return door.Probe(agent, thread, c, idem, door.IdempotencyScope(c.Key, msg.MessageID), hash, firstMessage)
	}); err != nil {
		return accepted{}, err
	}
	// The addressed task must be running — unless this is a retry of an
	// interjection already taken: its target has often ended since (the
	// interjection may be what ended it), and a retry gets the task the
	// first send made (D13, D17), never a refusal saying it was not taken.
	if addressed != "" {
		sctx, cancel := door.Step(ctx)
		target, err := st.GetRun(sctx, addressed)
		cancel()
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return accepted{}, err
		}
		// A cancelling task is still working (design.md §The doors): its
		// provider holds it, and the broker offers it interjections alike.
		if err != nil || target.ThreadID != thread.ThreadID || target.Status != run.Running && target.Status != run.Cancelling {
			if prior, ok, err := door.FindRetried(ctx, st, probe); err != nil {
				return accepted{}, door.ReusedKey(err, idem, reusedWhat)
			} else if ok {
				return accepted{run: prior.Run, after: prior.After}, nil
			}
			return accepted{}, door.Refuse(http.StatusUnprocessableEntity, door.CodeInvalidRunInput,
				"the interjection addresses %s, which is not the running task of context %s", addressed, thread.ThreadID)
		}
	}
	// A retried answer finds the task it reopened before it could reopen
	// the task again (it may have paused anew); any other retry is answered
	// by the insert's own look-up (store.Admit), a round trip fewer.
	if task != nil && task.Status == run.InputRequired {
		if prior, ok, err := door.FindRetried(ctx, st, probe); err != nil {
			return accepted{}, door.ReusedKey(err, idem, reusedWhat)
		} else if ok {
			return accepted{run: prior.Run, after: prior.After}, nil
		}
	}

	req := runinput.Request{Messages: []json.RawMessage{msg.aguiMessage()}, ForwardedProps: p.Metadata,
		Chain: chain, AddressedRunID: addressed,
		Dispatch: runinput.Dispatch{Funduq: h.o.Funduq, ProviderKey: agent.ProviderKey, AgentName: agent.Name}}

	// The answer to the thread's paused task reopens it, same id (D1); the
	// loser of a race is an ordinary queued run.
	if task != nil && task.Status == run.InputRequired {
		// On a bound thread the answer carries the resolution proof over
		// the task's open asks (design.md §The doors), checked before anything is
		// written.
		if taskThread.HeadKey != "" {
			asks, _, err := door.OpenAsks(ctx, st, *task)
			if err != nil {
				return accepted{}, err
			}
			if _, err := door.CheckResolution(bag.CallerBag, task.RunID, asks, []string{taskThread.HeadKey, agent.ProviderKey}); err != nil {
				return accepted{}, err
			}
		}
		req.ThreadID, req.RunID, req.ParentRunID = task.ThreadID, task.RunID, task.RunID
		built, err := c.build(req)
		if err != nil {
			return accepted{}, err
		}
		// The Idempotency-Key too: a retry carrying it is looked up by it
		// alone (D13), and would otherwise reopen the task's next pause
		// with this answer.
		sctx, cancel := door.Step(ctx)
		reopened, err := st.ReopenRun(sctx, store.Reopen{RunID: task.RunID, RunInput: built.Bytes, AddressedRunID: built.AddressedRunID, Messages: door.Messages(built),
			CallerRequestID: requestID, IdempotencyKey: probe.IdempotencyKey, RequestHash: hash})
		cancel()
		switch {
		case err == nil:
			return accepted{run: reopened, after: reopened.LastSeq}, nil
		case !errors.Is(err, store.ErrIllegalTransition):
			return accepted{}, err
		}
	}

	// A new run, queued on its thread.
	runID, threadID := run.NewRunID(), run.NewThreadID()
	if thread != nil {
		threadID = thread.ThreadID
	}
	req.ThreadID, req.RunID, req.ParentRunID = threadID, runID, ""
	built, err := c.build(req)
	if err != nil {
		return accepted{}, err
	}
	adm, err := door.Create(ctx, st, door.NewTurn{Agent: agent, Probe: probe, Built: built, Bag: bag, Caller: caller,
		RunID: runID, ThreadID: threadID, ParentThreadID: parentThread,
		Idem: idem, What: reusedWhat, Noun: "context", TokenSecret: h.o.TokenSecret, MaxQueued: h.o.Limits.MaxQueuedPerThread})
	if err != nil {
		return accepted{}, err
	}
	acc := accepted{run: adm.Run, after: adm.After, fresh: adm.Created}
	if adm.Created {
		acc.msgs = door.Messages(built)
	}
	return acc, nil
}

// reusedWhat names the caller's own request id in a reuse refusal.
const reusedWhat = "this messageId"

// build makes the run input with the one builder (D4), minting the KYOK
// grant when the caller opted in.
func (c *call) build(req runinput.Request) (runinput.Built, error) {
	if req.Chain != nil {
		// A chain gets funduq's dispatch hop, signed with this door's key:
		// only the key the leader published (design.md §Deployment).
		if err := door.CheckDispatchKey(c.agent, c.h.o.Funduq); err != nil {
			return runinput.Built{}, err
		}
	}
	bag, _ := door.ReadCallerBag(req.ForwardedProps, "metadata")
	if bag.Kyok != nil {
		req.KyokToken = identity.MintKyokToken(c.h.o.TokenSecret,
			identity.NewKyokClaims(req.RunID, c.agent.ProviderKey, c.agent.Name, c.h.o.Now()))
	}
	built, err := runinput.Build(req)
	if errors.Is(err, runinput.ErrInvalid) {
		return runinput.Built{}, door.Refuse(http.StatusUnprocessableEntity, door.CodeInvalidRunInput, "%v", err)
	}
	return built, err
}
