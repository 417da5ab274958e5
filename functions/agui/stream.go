package agui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/agui"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// LastEventIDHeader is the SSE reconnection header; its value is the seq of
// the last event the client received.
const LastEventIDHeader = "Last-Event-ID"

// feedRetry is how long a stream polls PostgreSQL alone after the live feed
// failed, before it tries Redis again.
const feedRetry = 5 * time.Second

// backlogPage is how many stored events one backlog read takes.
const backlogPage = 500

func (h *Handler) getEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("runId")
	after := 0
	raw := r.Header.Get(LastEventIDHeader)
	if raw == "" {
		raw = r.URL.Query().Get("after")
	}
	if raw = strings.TrimSpace(raw); raw != "" {
		n, ok := door.ParseLastEventID(raw)
		if !ok {
			door.WriteError(w, r, h.log, door.Refuse(http.StatusBadRequest, door.CodeBadRequest,
				"%s must be the non-negative integer id of an event received", LastEventIDHeader))
			return
		}
		after = n
	}
	ctx, cancel := context.WithTimeout(r.Context(), door.StorageTimeout)
	rn, err := h.o.Store.GetRun(ctx, id)
	if err == nil {
		// A bound thread's run answers only its parties; anyone else gets
		// exactly what an unknown id gets (D16).
		var th store.Thread
		th, err = h.o.Store.GetThread(ctx, rn.ThreadID)
		if err == nil && !door.MayRead(th, door.ViewerOf(r, nil, id, h.o.AuthorizedKey, h.o.Now())) {
			err = store.ErrNotFound
		}
	}
	cancel()
	if errors.Is(err, store.ErrNotFound) {
		err = door.Refuse(http.StatusNotFound, door.CodeRunNotFound, "no run %s", id)
	}
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	h.stream(w, r, rn, after, false)
}

// streamEnd is when a stream must end: its own budget, or the request's
// deadline (Lambda's) less the margin, whichever comes first; zero for none.
func (h *Handler) streamEnd(ctx context.Context) time.Time {
	var end time.Time
	if h.o.StreamBudget > 0 {
		end = time.Now().Add(h.o.StreamBudget)
	}
	if dl, ok := ctx.Deadline(); ok {
		if d := dl.Add(-h.o.DeadlineMargin); end.IsZero() || d.Before(end) {
			end = d
		}
	}
	return end
}

// stream answers 200 text/event-stream with run rn's events after seq
// after: the stored backlog, then the live tail, each event once and in seq
// order (SSE id = seq). It ends after a RUN_FINISHED or RUN_ERROR, when the
// run has ended (or paused) with nothing more to send, when the client
// goes, or before the stream's end with a comment saying how to resume.
// fresh: this request just wrote the run, so the stream starts on the live
// feed (as door.Tail.Fresh does).
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, rn store.Run, after int, fresh bool) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	t := &tail{h: h, w: w, rc: http.NewResponseController(w), runID: rn.RunID, threadID: rn.ThreadID, after: after}
	t.comment("funduq run " + rn.RunID)
	t.run(r.Context(), h.streamEnd(r.Context()), fresh)
}

type tail struct {
	h         *Handler
	w         http.ResponseWriter
	rc        *http.ResponseController
	runID     string
	threadID  string
	after     int
	relayed   int
	lastWrite time.Time
	broken    bool // a write failed: the client is gone
	unflushed bool // written since the last flush
	ended     bool // the relayed terminal event's round is known recorded as ended
}

func (t *tail) run(ctx context.Context, end time.Time, fresh bool) {
	o := t.h.o
	// A run this request just wrote is first looked for on the live feed
	// (see door.Tail.Fresh): a gap or a failing feed still reads
	// PostgreSQL, and so does the next DBCheck.
	checkDB := !fresh || o.Feed == nil
	staleEndAt := -1
	var nextDBCheck, feedDownUntil time.Time
	if !checkDB {
		nextDBCheck = time.Now().Add(o.DBCheck)
	}
	defer t.flush()
	for !t.broken && ctx.Err() == nil {
		// What the last pass wrote goes out before the next wait: one flush
		// per batch of events read, not one per event.
		t.flush()
		now := time.Now()
		if !end.IsZero() && !now.Before(end) {
			t.comment(fmt.Sprintf("stream budget reached: reconnect with GET /runs/%s/events and %s: %d",
				t.runID, LastEventIDHeader, t.after))
			return
		}
		if checkDB || !now.Before(nextDBCheck) {
			done, terminal, err := t.fromDB(ctx)
			if terminal {
				t.settle(ctx)
			}
			if done {
				return
			}
			checkDB = false
			nextDBCheck = now.Add(o.DBCheck)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				t.h.log.WarnContext(ctx, "stream: reading stored events failed", "run_id", t.runID, "err", err)
				checkDB = true // try again after the wait below
			}
		}
		wait := min(o.LiveBlock, time.Until(t.lastWrite.Add(o.Heartbeat)))
		if !end.IsZero() {
			wait = min(wait, time.Until(end))
		}
		wait = max(wait, time.Millisecond)
		useFeed := o.Feed != nil && !time.Now().Before(feedDownUntil) && staleEndAt != t.after && !checkDB
		if useFeed {
			entries, err := o.Feed.Read(ctx, t.runID, t.after, wait)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				t.h.log.WarnContext(ctx, "stream: live feed failed; polling PostgreSQL", "run_id", t.runID, "err", err)
				feedDownUntil = time.Now().Add(feedRetry)
				checkDB = true
				continue
			}
			for i, e := range entries {
				if e.End != "" {
					// The run ended, or an earlier round paused: the record
					// says which. Until a newer event arrives, this marker
					// would answer every read at once, so poll instead.
					staleEndAt, checkDB = t.after, true
					break
				}
				if e.Seq <= t.after {
					continue
				}
				if e.Seq != t.after+1 {
					checkDB = true // a gap (trimmed or unpublished): the record fills it
					break
				}
				if t.relay(e.Seq, e.Event) {
					t.ended = door.EndFollows(entries[i+1:], e.Seq)
					t.settle(ctx)
					return
				}
			}
		} else {
			sleep(ctx, min(o.PollInterval, wait))
			checkDB = true
		}
		if time.Since(t.lastWrite) >= o.Heartbeat {
			t.comment("keep-alive")
		}
	}
}

// fromDB relays the stored events after t.after and reports whether the
// stream is done: a terminal event was relayed (terminal), or the run has
// ended (or paused) and every event it has is relayed.
func (t *tail) fromDB(ctx context.Context) (done, terminal bool, err error) {
	cur, err := door.ReadRecord(ctx, t.h.o.Store, t.runID, t.after, backlogPage, func(seq int, ev json.RawMessage) bool {
		terminal = t.relay(seq, ev)
		return terminal || t.broken
	})
	switch {
	case err != nil:
		return false, false, err
	case terminal:
		// The status, read after the events, may already say so.
		t.ended = settled(cur.Status)
		return true, true, nil
	case t.broken:
		return true, false, nil
	}
	return settled(cur.Status) && t.after >= cur.LastSeq, false, nil
}

// settled: the run has ended, or paused on a question.
func settled(s run.Status) bool { return s.Terminal() || s == run.InputRequired }

// settle waits, after the terminal event was relayed, until the broker has
// recorded the run's outcome (or SettleWait passes), so a client whose
// stream ended reads a settled record: an answer to an interrupt it just
// saw finds the run input-required, the next turn finds the last one
// completed and its messages folded onto the thread.
//
// The end marker the broker publishes on the live feed right after it
// recorded the end says so without a read of the record: it usually comes
// with the terminal event or a moment after it (endWatch).
func (t *tail) settle(ctx context.Context) {
	o := t.h.o
	if t.ended || o.Feed != nil && door.WaitEnd(ctx, o.Feed, t.runID, t.after, endWatch) {
		return
	}
	deadline := time.Now().Add(o.SettleWait)
	for waited := false; ctx.Err() == nil; waited = true {
		dctx, cancel := context.WithTimeout(ctx, door.StorageTimeout)
		cur, err := o.Store.GetRun(dctx, t.runID)
		cancel()
		if err == nil && settled(cur.Status) {
			return
		}
		if waited {
			// The end is slow to be recorded (the broker is busy or gone):
			// the caller has what was relayed meanwhile, only the close
			// waits. Usually the end's marker wakes the first wait and the
			// events and the close go out together (a client that stops
			// reading at RUN_FINISHED then still finds the stream ended, and
			// its connection is reused).
			t.flush()
		}
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		if door.WaitEnd(ctx, o.Feed, t.runID, t.after, min(o.PollInterval, left)) {
			return
		}
	}
}

// endWatch is how long a stream that relayed a terminal event looks for
// the end marker before it reads the record. A run's end and its last
// events are one commit, published events first and the marker next, so
// the marker trails the terminal event by a Redis round trip; when the
// terminal event was stored ahead of the end (the finish frame had not
// come), the record is read, and what was relayed is flushed, after this
// short a wait.
const endWatch = 10 * time.Millisecond

// relay writes one stored event (SSE id = seq) and reports whether it ends
// the stream. Known AG-UI types go out without null members; unknown types
// untouched. A stream's first event is always a RUN_STARTED: the door
// synthesizes one (without an id: it is not a stored event) when the run's
// first relayed event is anything else.
func (t *tail) relay(seq int, ev json.RawMessage) bool {
	typ := typeOf(ev)
	out := []byte(ev)
	if agui.IsKnown(typ) {
		if d, err := agui.DropNulls(ev); err == nil {
			out = d
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, out); err == nil {
		out = buf.Bytes()
	}
	if t.relayed == 0 && typ != agui.TypeRunStarted {
		started, _ := json.Marshal(struct {
			Type     string `json:"type"`
			ThreadID string `json:"threadId"`
			RunID    string `json:"runId"`
		}{agui.TypeRunStarted, t.threadID, t.runID})
		t.write("data: " + string(started) + "\n\n")
	}
	t.write("id: " + strconv.Itoa(seq) + "\ndata: " + string(out) + "\n\n")
	t.relayed++
	t.after = seq
	return typ == agui.TypeRunFinished || typ == agui.TypeRunError
}

func (t *tail) comment(text string) { t.write(": " + text + "\n\n") }

func (t *tail) write(s string) {
	if t.broken {
		return
	}
	if _, err := t.w.Write([]byte(s)); err != nil {
		t.broken = true
		return
	}
	t.unflushed = true
	t.lastWrite = time.Now()
}

// flush sends what was written since the last flush.
func (t *tail) flush() {
	if t.broken || !t.unflushed {
		return
	}
	t.unflushed = false
	if err := t.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		t.broken = true
	}
}

func sleep(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}
