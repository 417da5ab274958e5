package kyok

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/redisbound"
	"github.com/funduq/funduq-go/functions/door"
)

// tail reads one reply stream in order.
type tail struct {
	rdb     *redis.Client
	key     string
	last    string
	pending []kyok.Reply
	alive   bool          // the relay took the request up: silence now means it is gone
	silence time.Duration // how long nothing at all may be heard once alive
	heard   time.Time     // when the relay was last heard
	ended   bool          // next has returned the answer's last reply
	end     time.Time     // when the call must end (zero: no deadline)
}

var (
	errSilent = errors.New("no reply in time")
	// errWriteFailed: the caller's connection took no more of the answer.
	errWriteFailed = errors.New("writing the answer to the caller failed")
	// errRelayLost: nothing at all — not even a keep-alive — came from the
	// relay for kyok.KeepAliveSilence: the leader serving the completion is
	// gone (the caller may retry; a new leader serves new calls).
	errRelayLost = errors.New("the funduq broker node relaying this completion went away")
	// errStorage: a read of the reply stream failed — Redis is down, or
	// hung past the read's bound (redisbound): funduq's own trouble,
	// never the LLM provider's (design.md §Failure).
	errStorage = errors.New("funduq cannot reach its storage")
)

// errDeadline: the request's own time (a Lambda invocation's, less the
// margin) ran out before the answer ended.
var errDeadline = errors.New("the completion did not end within this door's time for one call (its function's limit, less a margin); retry, or ask for a shorter answer")

// deadlineReached is the refusal of a call whose time ran out before its
// answer began (or, not streamed, ended): 504, the door's own limit.
func deadlineReached() *apiError {
	return &apiError{Status: http.StatusGatewayTimeout, Code: "deadline_reached", Message: errDeadline.Error(), Err: errDeadline}
}

// within is the wait for the next reply: d, or what is left before the
// call's end (zero or less once it has passed: next then returns what
// is pending, or errSilent).
func (t *tail) within(d time.Duration) time.Duration {
	if t.end.IsZero() {
		return d
	}
	return min(d, time.Until(t.end))
}

// timeUp reports that the call's end has passed.
func (t *tail) timeUp() bool { return !t.end.IsZero() && !time.Now().Before(t.end) }

// next returns the next reply, waiting at most wait. Keep-alives are not
// replies: they only prove the relay still holds the completion; once it
// has taken the request up (alive), silence past t.silence means it is gone.
func (t *tail) next(ctx context.Context, wait time.Duration) (kyok.Reply, error) {
	deadline := time.Now().Add(wait)
	for len(t.pending) == 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return kyok.Reply{}, errSilent
		}
		if t.alive && t.silence > 0 && time.Since(t.heard) > t.silence {
			return kyok.Reply{}, errRelayLost
		}
		block := min(left, 5*time.Second) // short blocks so a gone caller is noticed
		if t.alive && t.silence > 0 {
			block = min(block, t.silence/4)
		}
		if block < time.Millisecond {
			block = time.Millisecond
		}
		// Bounded by funduq's clock, not the client's (block + 10 s, or
		// for ever with read_timeout=0 while it sets a connection up).
		rctx, cancel := redisbound.Blocking(ctx, block)
		res, err := t.rdb.XRead(rctx, &redis.XReadArgs{Streams: []string{t.key, t.last}, Block: block, Count: 256}).Result()
		cancel()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return kyok.Reply{}, fmt.Errorf("%w: reading the replies: %w", errStorage, err)
		}
		for _, s := range res {
			for _, m := range s.Messages {
				t.last = m.ID
				t.heard = time.Now()
				raw, _ := m.Values[kyok.FieldReply].(string)
				var rep kyok.Reply
				if json.Unmarshal([]byte(raw), &rep) == nil && rep.Kind != kyok.ReplyKeepAlive {
					t.pending = append(t.pending, rep)
				}
			}
		}
	}
	rep := t.pending[0]
	t.pending = t.pending[1:]
	switch rep.Kind {
	case kyok.ReplyDone, kyok.ReplyError, kyok.ReplyUnavailable, kyok.ReplyBusy:
		t.ended = true
	case kyok.ReplyRelayLost:
		// The relay said what silence would have: it is gone.
		t.ended = true
		return kyok.Reply{}, errRelayLost
	}
	return rep, nil
}

// relay sends the checked call to the leader and answers from the reply
// stream. A calling agent that leaves before its answer ended is logged
// once, at INFO, as the caller going away (door.LogCallerGone), as the
// other doors log theirs.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, c call) {
	ctx := r.Context()
	reqJSON, err := json.Marshal(c.req)
	if err != nil {
		h.writeError(w, r, &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "funduq could not build the request", Err: err})
		return
	}
	stream := kyok.RequestStream(h.o.Prefix)
	// A storage call of the door's, bounded as the others (D13).
	actx, cancel := context.WithTimeout(ctx, door.StorageTimeout)
	entry, err := h.o.Redis.XAdd(actx, &redis.XAddArgs{Stream: stream, MaxLen: h.o.StreamMaxLen, Approx: true,
		Values: []any{kyok.FieldRequestID, c.req.RequestID, kyok.FieldRequest, string(reqJSON)}}).Result()
	cancel()
	if err != nil {
		h.writeError(w, r, storageDown(err))
		return
	}
	t := &tail{rdb: h.o.Redis, key: c.req.ReplyKey, last: "0-0"}
	// The answer must end before the request's deadline (a Lambda
	// invocation's) less the margin, or the function is killed mid-answer
	// and the agent's stream is cut with neither [DONE] nor an error: a
	// truncated answer taken for a whole one. Past it the call ends with
	// a typed failure (timeUp), as a relay lost mid-completion does.
	end := door.StreamEnd(ctx, 0, h.o.DeadlineMargin)
	t.end = end
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		// The entry holds the agent's prompt and the caller's context in the
		// clear, which funduq keeps only sealed (design.md §KYOK): once the
		// call is over nobody needs it (the relay takes a request up once, or
		// never), so it does not wait for MAXLEN to trim it.
		_ = h.o.Redis.XDel(cctx, stream, entry).Err()
		if (ctx.Err() != nil || t.timeUp()) && !t.ended {
			// The caller left before the answer ended: the relay must not
			// count what nobody read (design.md §Counters).
			_ = h.o.Redis.Set(cctx, kyok.GoneKey(h.o.Prefix, c.req.RequestID), 1, kyok.GoneTTL).Err()
		}
		_ = h.o.Redis.Del(cctx, c.req.ReplyKey).Err()
	}()
	log := h.o.Log.With("request_id", c.req.RequestID, "run_id", c.req.RunID, "provider_key", c.req.ProviderKey)

	// The leader takes the request up (or says the offering is not attached).
	first, err := t.next(ctx, h.o.AckTimeout)
	switch {
	case errors.Is(err, errSilent):
		h.writeError(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "relay_unavailable",
			Message: "no funduq broker node took up the completion; retry shortly"})
		return
	case errors.Is(err, errRelayLost):
		h.writeError(w, r, unanswered(err, ""))
		return
	case err != nil:
		if ctx.Err() == nil {
			h.writeError(w, r, storageDown(err))
		} else {
			door.LogCallerGone(log, r, err)
		}
		return
	case first.Kind == kyok.ReplyUnavailable:
		h.writeError(w, r, notAttached())
		return
	case first.Kind == kyok.ReplyBusy:
		h.writeError(w, r, &apiError{Status: http.StatusTooManyRequests, Code: "llm_busy", Message: first.Message})
		return
	case first.Kind != kyok.ReplyAccepted:
		t.pending = append([]kyok.Reply{first}, t.pending...)
	}
	t.alive, t.silence = true, h.o.RelaySilence

	// Wait for the first answer before committing to a status.
	rep, err := t.next(ctx, t.within(h.o.GapTimeout))
	if err != nil {
		if errors.Is(err, errSilent) && t.timeUp() {
			h.writeError(w, r, deadlineReached())
		} else if ctx.Err() == nil {
			h.writeError(w, r, unanswered(err, "the LLM provider did not answer"))
		} else {
			door.LogCallerGone(log, r, err)
		}
		return
	}
	if rep.Kind == kyok.ReplyError || rep.Kind == kyok.ReplyUnavailable {
		h.writeError(w, r, providerFailure(rep))
		return
	}
	if c.stream {
		h.stream(w, r, t, rep, log)
		return
	}
	var chunks []json.RawMessage
	held := 0
	for rep.Kind != kyok.ReplyDone {
		if rep.Kind == kyok.ReplyChunk {
			// A collapsed answer is held whole: bound it (streaming holds
			// nothing).
			if held += len(rep.Data); held > h.o.MaxCollapsed {
				h.writeError(w, r, &apiError{Status: http.StatusBadGateway, Code: "llm_answer_too_large",
					Message: fmt.Sprintf("the LLM provider's answer exceeds %d bytes; ask for stream: true", h.o.MaxCollapsed), Final: true})
				return
			}
			chunks = append(chunks, rep.Data)
		}
		rep, err = t.next(ctx, t.within(h.o.GapTimeout))
		if err != nil {
			if errors.Is(err, errSilent) && t.timeUp() {
				h.writeError(w, r, deadlineReached())
			} else if ctx.Err() == nil {
				h.writeError(w, r, unanswered(err, "the LLM provider went silent mid-completion"))
			} else {
				door.LogCallerGone(log, r, err)
			}
			return
		}
		if rep.Kind == kyok.ReplyError {
			h.writeError(w, r, providerFailure(rep))
			return
		}
	}
	writeJSON(w, http.StatusOK, kyok.Collapse(chunks, "chatcmpl-"+c.req.RequestID, kyok.ModelOf(c.req.Body), h.o.Now().Unix()))
}

// unanswered is the refusal for a call whose answer stopped coming before
// the door committed to a status. A relay that went away (errRelayLost)
// is funduq's own failure, not the LLM provider's: 503 relay_unavailable
// with Retry-After, as a call no node took up (design.md §KYOK); so is
// Redis failing the door's read (errStorage: 503 unavailable, as any
// storage trouble); other silence is the provider's, 502 llm_failed
// saying providerMsg.
func unanswered(err error, providerMsg string) *apiError {
	if errors.Is(err, errStorage) {
		return storageDown(err)
	}
	if errors.Is(err, errRelayLost) {
		return &apiError{Status: http.StatusServiceUnavailable, Code: "relay_unavailable",
			Message: errRelayLost.Error() + "; retry the call", Err: err}
	}
	return &apiError{Status: http.StatusBadGateway, Code: "llm_failed", Message: providerMsg, Err: err}
}

// providerFailure is the 502 for a failure before the answer began.
func providerFailure(rep kyok.Reply) *apiError {
	msg := rep.Message
	if msg == "" {
		msg = "the LLM provider failed the completion"
	}
	if len(rep.Refusal) > 0 {
		return &apiError{Status: http.StatusBadGateway, Code: "llm_refused", Message: msg, Refusal: rep.Refusal, Final: true}
	}
	return &apiError{Status: http.StatusBadGateway, Code: "llm_failed", Message: msg}
}

// stream writes the answer as SSE, starting with rep (a chunk or done).
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, t *tail, rep kyok.Reply, log *slog.Logger) {
	ctx := r.Context()
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(data []byte) bool {
		if _, err := w.Write([]byte("data: ")); err != nil {
			return false
		}
		if _, err := w.Write(data); err != nil {
			return false
		}
		if _, err := w.Write([]byte("\n\n")); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	fail := func(payload json.RawMessage) {
		b, _ := json.Marshal(map[string]json.RawMessage{"error": payload})
		write(b)
	}
	for {
		switch rep.Kind {
		case kyok.ReplyChunk:
			if !write(kyok.DropNulls(rep.Data)) {
				door.LogCallerGone(log, r, errWriteFailed)
				return
			}
		case kyok.ReplyDone:
			write([]byte("[DONE]"))
			return
		case kyok.ReplyError, kyok.ReplyUnavailable:
			if len(rep.Refusal) > 0 {
				fail(rep.Refusal)
			} else {
				fail(relayFailed(rep.Message))
			}
			return
		}
		var err error
		rep, err = t.next(ctx, t.within(h.o.GapTimeout))
		if err != nil {
			if ctx.Err() == nil {
				msg := "the LLM provider went silent mid-completion"
				switch {
				case errors.Is(err, errSilent) && t.timeUp():
					msg = errDeadline.Error()
				case errors.Is(err, errStorage):
					msg = errStorage.Error() + " mid-completion; retry the call"
				case errors.Is(err, errRelayLost):
					msg = errRelayLost.Error() + " mid-completion; retry the call"
				}
				fail(relayFailed(msg))
			} else {
				door.LogCallerGone(log, r, err)
			}
			return
		}
	}
}

func relayFailed(msg string) json.RawMessage {
	if msg == "" {
		msg = "the completion failed"
	}
	b, _ := json.Marshal(map[string]string{"message": msg, "type": "funduq_relay_failed"})
	return b
}
