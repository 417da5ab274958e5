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
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// LastEventIDHeader is the SSE reconnection header; its value is the seq of
// the last event the client received.
const LastEventIDHeader = "Last-Event-ID"

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
// order (SSE id = seq), as door.Tail reads them. It ends after a
// RUN_FINISHED or RUN_ERROR (once the run's end is recorded:
// door.Tail.AwaitEnd), when the run has ended (or paused) with nothing more
// to send, when the client goes, or before the stream's end with a comment
// saying how to resume. fresh: this request just wrote the run, so the
// stream starts on the live feed (door.Tail.Fresh).
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, rn store.Run, after int, fresh bool) {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w), runID: rn.RunID, threadID: rn.ThreadID}
	defer s.flush()
	s.comment("funduq run " + rn.RunID)
	ctx := r.Context()
	t := &door.Tail{O: h.tail, RunID: rn.RunID, After: after, Fresh: fresh,
		Relay: s.relay,
		Idle:  func() { s.comment("keep-alive") },
		Gone:  func() bool { return s.broken },
		Flush: s.flush,
	}
	switch t.Run(ctx, h.streamEnd(ctx)) {
	case door.TailStopped:
		t.AwaitEnd(ctx, s.flush)
	case door.TailBudget:
		s.comment(fmt.Sprintf("stream budget reached: reconnect with GET /runs/%s/events and %s: %d",
			rn.RunID, LastEventIDHeader, t.After))
	}
}

// sse writes one stream's events; writes are buffered until flush.
type sse struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	runID     string
	threadID  string
	relayed   int
	broken    bool // a write failed: the client is gone
	unflushed bool // written since the last flush
}

// relay writes one stored event (SSE id = seq) and reports whether it ends
// the stream. Known AG-UI types go out without null members; unknown types
// untouched. A stream's first event is always a RUN_STARTED: the door
// synthesizes one (without an id: it is not a stored event) when the run's
// first relayed event is anything else.
func (s *sse) relay(seq int, ev json.RawMessage) bool {
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
	if s.relayed == 0 && typ != agui.TypeRunStarted {
		started, _ := json.Marshal(struct {
			Type     string `json:"type"`
			ThreadID string `json:"threadId"`
			RunID    string `json:"runId"`
		}{agui.TypeRunStarted, s.threadID, s.runID})
		s.write("data: " + string(started) + "\n\n")
	}
	s.write("id: " + strconv.Itoa(seq) + "\ndata: " + string(out) + "\n\n")
	s.relayed++
	return typ == agui.TypeRunFinished || typ == agui.TypeRunError
}

func (s *sse) comment(text string) { s.write(": " + text + "\n\n") }

func (s *sse) write(text string) {
	if s.broken {
		return
	}
	if _, err := s.w.Write([]byte(text)); err != nil {
		s.broken = true
		return
	}
	s.unflushed = true
}

// flush sends what was written since the last flush.
func (s *sse) flush() {
	if s.broken || !s.unflushed {
		return
	}
	s.unflushed = false
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.broken = true
	}
}
