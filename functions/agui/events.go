package agui

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

func (h *Handler) getEvents(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("runId")
	// ?after= names one position or none: given twice it is refused, as a
	// repeated ?limit= or ?before= is, before the run is read (the same
	// answer for every id). Last-Event-ID, an EventSource's reconnect,
	// stands over it.
	after := r.URL.Query()["after"]
	if len(after) > 1 {
		door.WriteError(w, r, h.log, door.Refuse(http.StatusBadRequest, door.CodeBadRequest,
			"after must be given once: the seq of the last event received"))
		return
	}
	raw := r.Header.Get(LastEventIDHeader)
	pos, err := lastEventID(raw)
	if raw == "" && len(after) == 1 {
		// The refusal names what the caller sent.
		if pos, err = lastEventID(after[0]); err != nil {
			err = door.Refuse(http.StatusBadRequest, door.CodeBadRequest,
				"after must be the non-negative integer id of an event received")
		}
	}
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	pos = max(pos, 0)
	// The request's budget; each storage call has a door.Step of it.
	ctx, cancel := context.WithTimeout(r.Context(), 2*door.StepBound(r.Context()))
	sctx, scancel := door.Step(ctx)
	rn, err := h.o.Store.GetRun(sctx, id)
	scancel()
	if err == nil {
		// A bound thread's run answers only its parties; anyone else gets
		// exactly what an unknown id gets (D16).
		var th store.Thread
		sctx, scancel = door.Step(ctx)
		th, err = h.o.Store.GetThread(sctx, rn.ThreadID)
		scancel()
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
	h.stream(w, r, rn, pos, false, pos > 0)
}

// streamEnd is when a stream must end: its own budget, or the request's
// deadline (Lambda's) less the margin (door.StreamEnd); zero for none.
func (h *Handler) streamEnd(ctx context.Context) time.Time {
	return door.StreamEnd(ctx, h.o.StreamBudget, h.o.DeadlineMargin)
}

// lastEventID reads a Last-Event-ID value (the seq of the last event the
// client received): -1 when raw is empty, a 400 when it is not one.
func lastEventID(raw string) (int, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return -1, nil
	}
	n, ok := door.ParseLastEventID(raw)
	if !ok {
		return 0, door.Refuse(http.StatusBadRequest, door.CodeBadRequest,
			"%s must be the non-negative integer id of an event received", LastEventIDHeader)
	}
	return n, nil
}
