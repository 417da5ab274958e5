package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// taskParams are the params naming one task: {id, historyLength?, metadata?}.
type taskParams struct {
	ID            string
	HistoryLength int
	Metadata      map[string]json.RawMessage
}

func parseTaskParams(params json.RawMessage) (taskParams, *RPCError) {
	p := taskParams{HistoryLength: -1}
	var raw map[string]json.RawMessage
	if json.Unmarshal(params, &raw) != nil {
		return p, rpcErr(CodeInvalidParams, "params must be an object")
	}
	if id := raw["id"]; firstByte(id) != '"' || json.Unmarshal(id, &p.ID) != nil || p.ID == "" {
		return p, rpcErr(CodeInvalidParams, "params.id must be the task id (a non-empty string)")
	}
	// Each param's refusal names that param: a count sent in a form the
	// door does not read is not a wrong task id.
	if n, ok, e := readCount(raw["historyLength"], "params.historyLength"); e != nil {
		return p, e
	} else if ok {
		p.HistoryLength = n
	}
	if md := raw["metadata"]; len(md) > 0 && firstByte(md) != 'n' {
		if firstByte(md) != '{' || json.Unmarshal(md, &p.Metadata) != nil {
			return p, rpcErr(CodeInvalidParams, "params.metadata must be an object")
		}
	}
	return p, nil
}

// task reads a task of this agent and its context; another agent's task is
// as absent as an unknown one.
func (c *call) task(ctx context.Context, id string) (store.Run, store.Thread, error) {
	sctx, cancel := door.Step(ctx)
	rn, err := c.h.o.Store.GetRun(sctx, id)
	cancel()
	if errors.Is(err, store.ErrNotFound) || err == nil && (rn.ProviderKey != c.agent.ProviderKey || rn.AgentName != c.agent.Name) {
		return store.Run{}, store.Thread{}, notFoundTask(id)
	}
	if err != nil {
		return store.Run{}, store.Thread{}, err
	}
	sctx, cancel = door.Step(ctx)
	defer cancel()
	th, err := c.h.o.Store.GetThread(sctx, rn.ThreadID)
	return rn, th, err
}

// readable reports whether this request may read thread th (D16): anyone
// an unbound one; a bound one only its parties, shown by the authorizer
// seat, a presenter proof over the body or a view proof over id.
func (c *call) readable(th store.Thread, id string) bool {
	return door.MayRead(th, door.ViewerOf(c.r, c.body, id, c.h.o.AuthorizedKey, c.h.o.Now()))
}

// readableTask reads a task the request may read; anyone else gets exactly
// an unknown task's answer.
func (c *call) readableTask(ctx context.Context, id string) (store.Run, error) {
	rn, th, err := c.task(ctx, id)
	if err == nil && !c.readable(th, id) {
		return store.Run{}, notFoundTask(id)
	}
	return rn, err
}

func (c *call) get() {
	p, perr := parseTaskParams(c.req.Params)
	if perr != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, perr)
		return
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), 2*door.StepBound(c.r.Context()))
	defer cancel()
	rn, err := c.readableTask(ctx, p.ID)
	if err != nil {
		c.fail(err)
		return
	}
	view, _, err := c.h.project(ctx, rn, -1)
	if err != nil {
		c.fail(err)
		return
	}
	view.History = applyHistoryLength(view.History, p.HistoryLength)
	c.result(encodeTask(c.v, view))
}

// cancel is the one external cancel path (design.md §The doors): on a bound thread the
// proof is checked before anything about the run's state is said; a paused
// or ended task is not cancelable; otherwise the request is recorded (the
// broker asks the provider) and the task is answered with the marker.
func (c *call) cancel() {
	p, perr := parseTaskParams(c.req.Params)
	if perr != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, perr)
		return
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), 2*door.StepBound(c.r.Context()))
	defer cancel()
	st := c.h.o.Store
	rn, th, err := c.task(ctx, p.ID)
	if err != nil {
		c.fail(err)
		return
	}
	by := ""
	if th.HeadKey != "" {
		by, err = door.CheckCancelProof(p.Metadata["cancel"], rn.RunID, []string{th.HeadKey, c.agent.ProviderKey}, c.h.o.Now())
		if err != nil {
			// A party learns why; a stranger learns nothing, not even
			// that the task exists (D16).
			if !c.readable(th, p.ID) {
				err = notFoundTask(p.ID)
			}
			c.fail(err)
			return
		}
	}
	sctx, scancel := door.Step(ctx)
	updated, err := st.RequestCancel(sctx, rn.RunID, by)
	scancel()
	switch {
	case errors.Is(err, store.ErrNotCancellable):
		c.fail(&RPCError{Code: CodeTaskNotCancelable, Message: "task " + rn.RunID + " is waiting for input: nobody is working on it, so there is nobody to ask to stop",
			Data: map[string]any{"state": StateInputRequired.Name(c.v)}})
		return
	case errors.Is(err, store.ErrRunEnded):
		c.fail(&RPCError{Code: CodeTaskNotCancelable, Message: "task " + rn.RunID + " has already ended"})
		return
	case err != nil:
		c.fail(err)
		return
	}
	view, _, err := c.h.project(ctx, updated, -1)
	if err != nil {
		c.fail(err)
		return
	}
	view.Meta[CancelRequestedKey] = true
	view.History = applyHistoryLength(view.History, p.HistoryLength)
	c.result(encodeTask(c.v, view))
}

func (c *call) subscribe() {
	p, perr := parseTaskParams(c.req.Params)
	if perr != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, perr)
		return
	}
	after, perr := c.lastEventID()
	if perr != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, perr)
		return
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), 2*door.StepBound(c.r.Context()))
	rn, err := c.readableTask(ctx, p.ID)
	cancel()
	if err != nil {
		c.fail(err)
		return
	}
	if StateOf(rn.Status).Terminal() {
		c.fail(&RPCError{Code: CodeUnsupportedOperation, Message: "task " + rn.RunID + " has ended; read it with " + methodName(c.v, OpGet),
			Data: map[string]any{"state": StateOf(rn.Status).Name(c.v)}})
		return
	}
	if after < 0 || after > rn.LastSeq {
		after = rn.LastSeq
	}
	c.stream(rn, after, p.HistoryLength)
}

// list serves ListTasks (v1.0): the tasks of one context for this agent,
// newest status first, paged by an offset token.
func (c *call) list() {
	var p struct {
		ContextID, Status, PageToken, StatusTimestampAfter string
		IncludeArtifacts                                   bool
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(c.req.Params, &raw) != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, rpcErr(CodeInvalidParams, "params must be an object"))
		return
	}
	// Each field read on its own, so a refusal names it in the door's
	// words (D13: one error envelope), and counts read as ProtoJSON
	// writes them. In a fixed order (not a map's), so one request is
	// refused the same way every time.
	for _, f := range []struct {
		key  string
		into *string
	}{{"contextId", &p.ContextID}, {"status", &p.Status}, {"pageToken", &p.PageToken}, {"statusTimestampAfter", &p.StatusTimestampAfter}} {
		if v := raw[f.key]; len(v) > 0 && firstByte(v) != 'n' && (firstByte(v) != '"' || json.Unmarshal(v, f.into) != nil) {
			c.h.writeRPC(c.w, c.req.ID, nil, rpcErr(CodeInvalidParams, "params.%s must be a string", f.key))
			return
		}
	}
	if v := raw["includeArtifacts"]; len(v) > 0 && firstByte(v) != 'n' && json.Unmarshal(v, &p.IncludeArtifacts) != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, rpcErr(CodeInvalidParams, "params.includeArtifacts must be a boolean"))
		return
	}
	// A negative count here limits nothing, as before (readInt32).
	pageSize, _, e := readInt32(raw["pageSize"], "params.pageSize")
	if e != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, e)
		return
	}
	hl, hasHL, e := readInt32(raw["historyLength"], "params.historyLength")
	if e != nil {
		c.h.writeRPC(c.w, c.req.ID, nil, e)
		return
	}
	if !hasHL || hl < 0 {
		hl = -1
	}
	type page struct {
		Tasks         []wireTask `json:"tasks"`
		NextPageToken string     `json:"nextPageToken"`
		PageSize      int        `json:"pageSize"`
		TotalSize     int        `json:"totalSize"`
	}
	empty := page{Tasks: []wireTask{}}
	size := 50
	if pageSize > 0 {
		size = min(pageSize, 1000)
	}
	var cur listCursor
	if p.PageToken != "" {
		k, ok := parseListCursor(p.PageToken)
		if !ok {
			c.h.writeRPC(c.w, c.req.ID, nil, rpcErr(CodeInvalidParams, "pageToken %q is not a token this door issued", p.PageToken))
			return
		}
		cur = k
	}
	var want TaskState
	// No filter: absent, the unspecified state, or "UNRECOGNIZED" (what
	// @a2a-js/sdk 1.3 serializes for an unset status).
	if p.Status != "" && p.Status != "TASK_STATE_UNSPECIFIED" && p.Status != "UNRECOGNIZED" {
		s, ok := ParseTaskState(p.Status)
		if !ok {
			c.h.writeRPC(c.w, c.req.ID, nil, rpcErr(CodeInvalidParams, "status %q is not a task state", p.Status))
			return
		}
		want = s
	}
	var afterTS time.Time
	if p.StatusTimestampAfter != "" {
		t, err := time.Parse(time.RFC3339Nano, p.StatusTimestampAfter)
		if err != nil {
			c.h.writeRPC(c.w, c.req.ID, nil, rpcErr(CodeInvalidParams, "statusTimestampAfter must be an RFC 3339 timestamp"))
			return
		}
		afterTS = t
	}
	if p.ContextID == "" {
		c.result(empty)
		return
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), 3*door.StepBound(c.r.Context()))
	defer cancel()
	// A bound context lists only to its parties (a view proof signs the
	// context id); anyone else gets an unknown context's empty page.
	sctx, scancel := door.Step(ctx)
	th, err := c.h.o.Store.GetThread(sctx, p.ContextID)
	scancel()
	if errors.Is(err, store.ErrNotFound) || err == nil && !c.readable(th, p.ContextID) {
		c.result(empty)
		return
	}
	if err != nil {
		c.fail(err)
		return
	}
	q := store.TaskPage{ThreadID: p.ContextID, ProviderKey: c.agent.ProviderKey, AgentName: c.agent.Name,
		ActiveAfter: afterTS, Limit: size + 1}
	if want != StateUnspecified {
		q.Filter = true
		for st, ts := range StateMapping {
			if ts == want {
				q.Statuses = append(q.Statuses, string(st))
			}
		}
	}
	// The page starts after the cursor, not at an offset: a task added
	// (or touched) between two pages sorts before the cursor and does not
	// shift the rest, so no task is shown twice. One more than the page is
	// read to learn whether there is a next one.
	if p.PageToken != "" {
		q.HasAfter, q.AfterActive, q.AfterRunID = true, time.Unix(0, cur.at), cur.runID
	}
	sctx, scancel = door.Step(ctx)
	match, total, err := c.h.o.Store.ContextTasks(sctx, q)
	scancel()
	if err != nil {
		c.fail(err)
		return
	}
	out := page{Tasks: []wireTask{}, TotalSize: total}
	for i := 0; i < len(match) && i < size; i++ {
		view, _, err := c.h.project(ctx, match[i], -1)
		if err != nil {
			c.fail(err)
			return
		}
		if !p.IncludeArtifacts {
			view.Artifacts = nil
		}
		view.History = applyHistoryLength(view.History, hl)
		out.Tasks = append(out.Tasks, encodeTask(c.v, view))
	}
	out.PageSize = len(out.Tasks)
	if len(match) > size {
		out.NextPageToken = listKey(match[size-1]).String()
	}
	c.result(out)
}

// listCursor is a ListTasks page token: the sort key of the last task a
// page showed (tasks go newest activity first, then by run id).
type listCursor struct {
	at    int64 // LastActivityAt, Unix nanoseconds
	runID string
}

func listKey(r store.Run) listCursor {
	return listCursor{at: r.LastActivityAt.UnixNano(), runID: r.RunID}
}

func (k listCursor) String() string { return strconv.FormatInt(k.at, 10) + "." + k.runID }

func parseListCursor(tok string) (listCursor, bool) {
	at, id, ok := strings.Cut(tok, ".")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" {
		return listCursor{}, false
	}
	return listCursor{at: n, runID: id}, true
}
