package agui

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// outcome is what a POST resolves to: a run to stream (from after), or a
// thread snapshot to return.
type outcome struct {
	run      store.Run
	after    int
	snapshot *Snapshot
	// fresh: this request wrote the run, so nothing of it can have been
	// relayed anywhere before its stream starts (door.Tail.Fresh).
	fresh bool
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.o.MaxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			door.WriteError(w, r, h.log, door.Refuse(http.StatusRequestEntityTooLarge, door.CodeBodyTooLarge,
				"the body is larger than %d bytes", h.o.MaxBody))
			return
		}
		door.WriteError(w, r, h.log, door.Refuse(http.StatusBadRequest, door.CodeBadRequest, "could not read the body"))
		return
	}
	if e := door.CheckBody(body, h.o.Limits.MaxJSONDepth); e != nil {
		door.WriteError(w, r, h.log, e)
		return
	}
	in, err := ParseRunAgentInput(body)
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	if n := len(in.Messages); n > h.o.Limits.MaxMessages {
		door.WriteError(w, r, h.log, door.Refuse(http.StatusUnprocessableEntity, door.CodeTooManyMessages,
			"the request carries %d messages; at most %d are accepted", n, h.o.Limits.MaxMessages))
		return
	}
	// A retried POST resumes where its dropped stream ended (D9), as a
	// fetch-based SSE client says with Last-Event-ID.
	resumeAfter, err := lastEventID(r.Header.Get(LastEventIDHeader))
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	// The request's budget; each of its storage calls has a door.Step of
	// it, so one that meets a hung database costs the caller one bound.
	ctx, cancel := context.WithTimeout(r.Context(), 2*door.StepBound(r.Context()))
	out, err := h.accept(ctx, r, body, in, true)
	if errors.Is(err, store.ErrThreadExists) {
		// The thread named, taken for unknown, exists: the request is one
		// on it, checked as such from the start.
		out, err = h.accept(ctx, r, body, in, false)
	}
	if errors.Is(err, store.ErrThreadGone) {
		// Retention deleted the thread between its check and the write:
		// checked again, it is unknown, as to a request arriving now
		// (design.md §The doors).
		out, err = h.accept(ctx, r, body, in, false)
	}
	cancel()
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	if out.snapshot != nil {
		writeSnapshot(w, out.snapshot)
		return
	}
	resumed := !out.fresh && resumeAfter > out.after
	if resumed {
		// Only on a run this request did not make: a new run's ids are
		// not the ones the client counted.
		out.after = resumeAfter
	}
	// Only a resume inside a round reopens what is open: a stream from
	// where this request's round began (an answer's, a retry's without
	// Last-Event-ID) starts after a round's end, which closed everything,
	// and reads nothing again (design.md §The doors, "A resume from inside
	// a message").
	h.stream(w, r, out.run, out.after, out.fresh, resumed)
}

// accept runs the door's checks in order (design.md §The doors, the first failing
// step wins) and writes the run, or reopens the paused one.
//
// guess lets it take a thread id funduq did not mint (a caller's first
// turn names one of its own, which funduq never adopts) for unknown
// without reading it: the insert checks, in its first round trip, that no
// such thread exists (NewRun.UnlessThread), and store.ErrThreadExists
// says to call again without the guess.
func (h *Handler) accept(ctx context.Context, r *http.Request, body []byte, in RunAgentInput, guess bool) (outcome, error) {
	// 1. The agent.
	agent, err := door.FindAgentCached(ctx, h.o.Store, r.PathValue("provider"), r.PathValue("name"))
	if err != nil {
		return outcome{}, err
	}

	// 2. The caller: an actor chain needs its presenter (D12). A KYOK
	// opt-in's context is for the LLM provider alone: it leaves the bag
	// here, before anything is stored or relayed, and travels sealed.
	bag, err := door.ReadBag(in.ForwardedProps, "forwardedProps")
	if err != nil {
		return outcome{}, err
	}
	in.ForwardedProps = bag.Raw
	// The caller key (authorizer seat or presenter proof) scopes the
	// request's idempotency key and is the presenter of a chain.
	caller, err := door.ReadCaller(r, body, h.o.AuthorizedKey, h.o.Now(), bag)
	if err != nil {
		return outcome{}, err
	}
	callerKey, chain, head := caller.Key, caller.Chain, caller.Head()

	// 3. KYOK opt-in.
	if err := door.CheckKyokOptIn(ctx, h.o.Store, bag.Kyok); err != nil {
		return outcome{}, err
	}

	// 4. The thread: funduq's authority over the id. An id funduq does not
	// know is never adopted.
	var thread *store.Thread
	guess = guess && in.ThreadID != "" && !run.IsMintedID(run.ThreadPrefix, in.ThreadID) && len(in.ResumeEntries) == 0
	if in.ThreadID != "" && !guess {
		sctx, cancel := door.Step(ctx)
		t, err := h.o.Store.GetThread(sctx, in.ThreadID)
		cancel()
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return outcome{}, err
		default:
			thread = &t
		}
	}
	if thread != nil {
		if err := door.CheckThread(*thread, agent, head, "thread", ""); err != nil {
			if len(in.ResumeEntries) > 0 && !door.MayRead(*thread, door.Viewer{Caller: callerKey}) {
				// A stranger's answer learns nothing: exactly an unknown
				// thread's refusal (D16), through another agent's
				// endpoint too, where the 409 would say the bound thread
				// exists.
				return outcome{}, unknownResumeThread(in.ThreadID)
			}
			return outcome{}, err
		}
		// What the request repeats of the thread's record (a client that
		// sends the conversation it holds) is not said again: neither
		// stored twice nor handed to the agent as part of this turn. The
		// request's hash, which recognises its retries, is the body's.
		n, err := h.resent(ctx, *thread, callerKey, in.Messages, len(body))
		if err != nil {
			return outcome{}, err
		}
		in.Messages = in.Messages[n:]
	}

	// A retried request returns the original run (D13).
	idem, err := door.IdempotencyKey(r)
	if err != nil {
		return outcome{}, err
	}
	// Keys belong to their caller (D17, door.Probe): a known caller's first
	// turn on a thread id funduq does not know (never adopted) is matched
	// by its threadId and runId with the same body, so a retried first turn
	// streams the run it made instead of running again.
	hash := identity.SHA256Hex(body)
	firstTurn := ""
	if in.ThreadID != "" && in.CallerRunID != "" {
		firstTurn = "agui-turn:" + in.ThreadID + ":" + in.CallerRunID + ":" + hash
	}
	// On a thread the runId is stored and matched within its caller too
	// (door.IdempotencyScope): callers sharing an unbound thread each have
	// their own ids, so another caller's turn under the same runId is its
	// own run, never a 422 about an id it did not use nor the other
	// caller's run. An anonymous caller's is matched with the body's hash.
	requestID := door.IdempotencyScope(callerKey, in.CallerRunID)
	probe := door.Probe(agent, thread, caller, idem, requestID, hash, firstTurn)
	if thread == nil && guess {
		probe.UnlessThread = in.ThreadID
	}
	// A retry of a presenter's whose proof went stale is refused, not run
	// again as an anonymous caller's (design.md §The doors).
	if err := door.RefuseStaleRetry(ctx, h.o.Store, caller, func(c door.Caller) store.NewRun {
		return door.Probe(agent, thread, c, idem, door.IdempotencyScope(c.Key, in.CallerRunID), hash, firstTurn)
	}); err != nil {
		return outcome{}, err
	}
	// 5. Is this an answer to a paused run (D1)?
	if len(in.ResumeEntries) > 0 || in.HasToolMessages() {
		// A retried answer finds the run it reopened before it could
		// reopen the run again (it may have paused anew). Any other retry
		// is answered by the insert's own look-up (store.Admit), which
		// saves a round trip per run.
		if prior, ok, err := door.FindRetried(ctx, h.o.Store, probe); err != nil {
			return outcome{}, door.ReusedKey(err, idem, reusedWhat)
		} else if ok {
			return outcome{run: prior.Run, after: prior.After}, nil
		}
		if f := afterRetryLookup.Load(); f != nil {
			(*f)()
		}
		if thread == nil {
			if len(in.ResumeEntries) > 0 {
				return outcome{}, unknownResumeThread(in.ThreadID)
			}
		} else {
			out, answered, err := h.answer(ctx, agent, *thread, in, bag.CallerBag, chain, hash, requestID, probe)
			if err != nil || answered {
				return out, err
			}
			if len(in.ResumeEntries) > 0 {
				// A result with no ask to land on does not enter dressed as
				// an utterance. Unless it landed: this request's first
				// attempt may have reopened the run between the look-up
				// above and the paused run's, and a retry is answered with
				// the round it opened (D13), as one arriving later is.
				if prior, ok, err := door.FindRetried(ctx, h.o.Store, probe); err != nil {
					return outcome{}, door.ReusedKey(err, idem, reusedWhat)
				} else if ok {
					return outcome{run: prior.Run, after: prior.After}, nil
				}
				snap, err := h.snapshot(ctx, *thread, newestPage)
				return outcome{snapshot: &snap}, err
			}
		}
	}

	// 6. A new run, queued on its thread (D2: the broker sequences it).
	runID := run.NewRunID()
	threadID := run.NewThreadID()
	if thread != nil {
		threadID = thread.ThreadID
	}
	built, err := h.build(agent, threadID, runID, in.ParentRunID, in, bag.CallerBag, chain)
	if err != nil {
		return outcome{}, err
	}
	adm, err := door.Create(ctx, h.o.Store, door.NewTurn{Agent: agent, Probe: probe, Built: built, Bag: bag, Caller: caller,
		RunID: runID, ThreadID: threadID, ParentRunID: in.ParentRunID,
		Idem: idem, What: reusedWhat, Noun: "thread", TokenSecret: h.o.TokenSecret, MaxQueued: h.o.Limits.MaxQueuedPerThread})
	if err != nil {
		return outcome{}, err
	}
	return outcome{run: adm.Run, after: adm.After, fresh: adm.Created}, nil
}

// IdempotencyHeader names the header a retried POST repeats (D13).
const IdempotencyHeader = door.IdempotencyHeader

// reusedWhat names the caller's own request id in a reuse refusal.
const reusedWhat = "this runId"

// unknownResumeThread is the refusal of a resume naming a thread funduq
// does not know, or one the caller may not know of.
func unknownResumeThread(id string) error {
	return door.Refuse(http.StatusNotFound, door.CodeThreadNotFound,
		"a resume must name the funduq thread of the paused run; thread %q is unknown", id)
}

// build makes the run's input with the one builder (D4).
func (h *Handler) build(agent store.Agent, threadID, runID, parentRunID string, in RunAgentInput, bag door.CallerBag,
	chain *identity.Chain) (runinput.Built, error) {
	if chain != nil {
		// A chain gets funduq's dispatch hop, signed with this door's key:
		// only the key the leader published (design.md §Deployment).
		if err := door.CheckDispatchKey(agent, h.o.Funduq); err != nil {
			return runinput.Built{}, err
		}
	}
	req := runinput.Request{ThreadID: threadID, RunID: runID, ParentRunID: parentRunID, State: in.State,
		Messages: in.Messages, Tools: in.Tools, Context: in.Context, ForwardedProps: in.ForwardedProps,
		Resume: in.Resume, Chain: chain,
		Dispatch: runinput.Dispatch{Funduq: h.o.Funduq, ProviderKey: agent.ProviderKey, AgentName: agent.Name}}
	if bag.Kyok != nil {
		req.KyokToken = identity.MintKyokToken(h.o.TokenSecret,
			identity.NewKyokClaims(runID, agent.ProviderKey, agent.Name, h.o.Now()))
	}
	built, err := runinput.Build(req)
	if errors.Is(err, runinput.ErrInvalid) {
		return runinput.Built{}, invalid("%v", err)
	}
	return built, err
}

// answer handles a body that may answer the thread's paused run. answered
// is true when the body completed the run's asks: out is then the reopened
// run to stream, or — when another answer won the race — the snapshot.
func (h *Handler) answer(ctx context.Context, agent store.Agent, thread store.Thread, in RunAgentInput, bag door.CallerBag,
	chain *identity.Chain, hash, requestID string, probe store.NewRun) (out outcome, answered bool, err error) {
	paused, asks, ok, err := h.answered(ctx, thread.ThreadID, in)
	if err != nil || !ok {
		return outcome{}, false, err
	}
	// On a bound thread the answer carries the resolution proof
	// (design.md §The doors), checked before anything is written.
	if thread.HeadKey != "" {
		if _, err := door.CheckResolution(bag, paused.RunID, asks, []string{thread.HeadKey, agent.ProviderKey}); err != nil {
			return outcome{}, true, err
		}
	}
	built, err := h.build(agent, paused.ThreadID, paused.RunID, paused.RunID, in, bag, chain)
	if err != nil {
		return outcome{}, true, err
	}
	sctx, cancel := door.Step(ctx)
	reopened, err := h.o.Store.ReopenRun(sctx, store.Reopen{RunID: paused.RunID, RunInput: built.Bytes, AddressedRunID: built.AddressedRunID, Messages: door.Messages(built),
		// The Idempotency-Key too: a retry carrying it is looked up by it
		// alone (D13), and would otherwise find nothing and answer the
		// run's next pause with this answer.
		CallerRequestID: requestID, IdempotencyKey: probe.IdempotencyKey, RequestHash: hash})
	cancel()
	if errors.Is(err, store.ErrIllegalTransition) {
		// Another answer landed first. When it was this request — a
		// retry racing the attempt that reopened the run, which it waited
		// behind — it is answered as a retry arriving after it would be:
		// the round it opened (D13), never a snapshot saying its answer
		// lost.
		if prior, ok, err := door.FindRetried(ctx, h.o.Store, probe); err != nil {
			return outcome{}, true, door.ReusedKey(err, probe.IdempotencyKey, reusedWhat)
		} else if ok {
			return outcome{run: prior.Run, after: prior.After}, true, nil
		}
		// Someone else's: there is no second resume to watch.
		snap, err := h.snapshot(ctx, thread, newestPage)
		return outcome{snapshot: &snap}, true, err
	}
	if err != nil {
		return outcome{}, true, err
	}
	return outcome{run: reopened, after: reopened.LastSeq}, true, nil
}

// MaxPausedWeighed is how many of a thread's paused runs, newest first,
// an AG-UI answer is weighed against (design.md §The doors, "An answer
// reopens the run whose question it answers").
const MaxPausedWeighed = 8

// answered finds the paused run of the thread whose every open ask in
// answers: with no per-thread gate (D2) a thread may hold several, and an
// answer names the question it answers (its interrupt or tool call ids),
// so it reopens that run, not merely the newest (seed 000: "targeting the
// thread's input-required run specifically"). ok is false when none of the
// MaxPausedWeighed newest is answered whole.
func (h *Handler) answered(ctx context.Context, threadID string, in RunAgentInput) (store.Run, []string, bool, error) {
	sctx, cancel := door.Step(ctx)
	paused, err := h.o.Store.ThreadRunsInStatus(sctx, threadID, MaxPausedWeighed, run.InputRequired)
	cancel()
	if err != nil {
		return store.Run{}, nil, false, err
	}
	for _, p := range paused {
		asks, interrupts, err := door.OpenAsks(ctx, h.o.Store, p)
		if err != nil {
			return store.Run{}, nil, false, err
		}
		if completes(asks, interrupts, in) {
			return p, asks, true, nil
		}
	}
	return store.Run{}, nil, false, nil
}

// completes reports whether in answers every open ask: resume entries
// answer the interrupts they name, tool messages answer the tool calls they
// name except those that belong to interrupts (those only resume answers).
func completes(asks []string, interrupts []door.InterruptRef, in RunAgentInput) bool {
	if len(asks) == 0 {
		return false
	}
	answered := map[string]bool{}
	interruptAsk := map[string]bool{}
	for _, it := range interrupts {
		interruptAsk[it.Ask] = true
	}
	for _, re := range in.ResumeEntries {
		for _, it := range interrupts {
			if it.ID == re.InterruptID {
				answered[it.Ask] = true
			}
		}
	}
	for _, m := range in.Messages {
		if roleOf(m) != "tool" {
			continue
		}
		if id := memberString(m, "toolCallId"); id != "" && !interruptAsk[id] {
			answered[id] = true
		}
	}
	for _, a := range asks {
		if !answered[a] {
			return false
		}
	}
	return true
}

// typeOf is an event's "type" string ("" when it has none).
func typeOf(ev json.RawMessage) string { return door.TypeOf(ev) }
