package agui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// Snapshot is a thread as it stands (design.md §The doors): its messages in thread
// order, its newest active run, and — only while a run waits for an answer —
// that run with its outstanding ask ids. The key waiting_run is present only
// when a run waits.
type Snapshot struct {
	ThreadID   string            `json:"thread_id"`
	Messages   []json.RawMessage `json:"messages"`
	ActiveRun  *RunRef           `json:"active_run"`
	WaitingRun *WaitingRun       `json:"waiting_run,omitempty"`
}

// RunRef names a run and its status.
type RunRef struct {
	RunID  string `json:"run_id"`
	Status string `json:"status"`
}

// WaitingRun is a paused run and what it asks.
type WaitingRun struct {
	RunID           string   `json:"run_id"`
	OutstandingAsks []string `json:"outstanding_asks"`
}

var activeStatuses = []run.Status{run.Queued, run.Offering, run.Running, run.Cancelling}

func (h *Handler) snapshot(ctx context.Context, threadID string) (Snapshot, error) {
	msgs, err := h.o.Store.ThreadMessages(ctx, threadID, 0)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{ThreadID: threadID, Messages: msgs}
	if snap.Messages == nil {
		snap.Messages = []json.RawMessage{}
	}
	active, ok, err := h.o.Store.NewestRunInStatus(ctx, threadID, activeStatuses...)
	if err != nil {
		return Snapshot{}, err
	}
	if ok {
		snap.ActiveRun = &RunRef{RunID: active.RunID, Status: string(active.Status)}
	}
	waiting, ok, err := h.o.Store.NewestRunInStatus(ctx, threadID, run.InputRequired)
	if err != nil {
		return Snapshot{}, err
	}
	if ok {
		asks, _, err := door.OpenAsks(ctx, h.o.Store, waiting)
		if err != nil {
			return Snapshot{}, err
		}
		if asks == nil {
			asks = []string{}
		}
		snap.WaitingRun = &WaitingRun{RunID: waiting.RunID, OutstandingAsks: asks}
	}
	return snap, nil
}

func (h *Handler) getThread(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("threadId")
	ctx, cancel := context.WithTimeout(r.Context(), 2*door.StorageTimeout)
	defer cancel()
	// The first storage call is bounded alone (a hung database: 503 soon).
	gctx, gcancel := context.WithTimeout(ctx, door.StorageTimeout)
	th, err := h.o.Store.GetThread(gctx, id)
	gcancel()
	if err == nil && !door.MayRead(th, door.ViewerOf(r, nil, id, h.o.AuthorizedKey, h.o.Now())) {
		// A bound thread answers only its parties; anyone else gets
		// exactly what an unknown id gets (D16).
		err = store.ErrNotFound
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = door.Refuse(http.StatusNotFound, door.CodeThreadNotFound, "no thread %s", id)
		}
		door.WriteError(w, r, h.log, err)
		return
	}
	snap, err := h.snapshot(ctx, id)
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	door.WriteJSON(w, http.StatusOK, snap)
}
