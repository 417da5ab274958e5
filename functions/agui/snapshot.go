package agui

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// Snapshot is a thread as it stands (design.md §The doors): its newest
// messages in thread order, its newest active run, and — only while a run
// waits for an answer — that run with its outstanding ask ids. The key
// waiting_run is present only when a run waits.
//
// The messages are one page, bounded (design.md §The doors, "A thread
// snapshot is one bounded page"): a thread that fits is sent whole, as it
// always was; a longer one sends its newest messages with has_more and
// next_before, the ?before= of the page before it. A message larger than a
// whole page is named under omitted_messages, never dropped silently. The
// three keys are present only when they say something.
type Snapshot struct {
	ThreadID        string            `json:"thread_id"`
	Messages        []json.RawMessage `json:"messages"`
	ActiveRun       *RunRef           `json:"active_run"`
	WaitingRun      *WaitingRun       `json:"waiting_run,omitempty"`
	HasMore         bool              `json:"has_more,omitempty"`
	NextBefore      string            `json:"next_before,omitempty"`
	OmittedMessages []OmittedMessage  `json:"omitted_messages,omitempty"`
}

// OmittedMessage names a stored message too large for any page.
type OmittedMessage struct {
	MessageID string `json:"message_id"`
	Bytes     int    `json:"bytes"`
}

// MaxSnapshotMessages is the most messages one snapshot page holds, and
// its default: ?limit= may ask for fewer.
const MaxSnapshotMessages = 1000

// MaxSnapshotBytes bounds a snapshot page's messages, as stored. With the
// rest of the snapshot it stays well under the 6 MB a Lambda function may
// answer (design.md §The doors), and a server door holds no more than it.
const MaxSnapshotBytes = 4 << 20

// page is which messages a snapshot holds: the newest limit of them older
// than the stored position before (0: the newest).
type page struct {
	limit  int
	before int64
}

var newestPage = page{limit: MaxSnapshotMessages}

// parsePage reads ?limit= and ?before= of GET /threads/{id}. A refusal
// depends on the query alone, never on the thread, so it tells a stranger
// nothing (D16).
func parsePage(r *http.Request) (page, error) {
	p := newestPage
	q := r.URL.Query()
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if len(v) > 1 || err != nil || n < 1 || n > MaxSnapshotMessages {
			return p, door.Refuse(http.StatusBadRequest, door.CodeBadRequest,
				"limit must be one integer from 1 to %d", MaxSnapshotMessages)
		}
		p.limit = n
	}
	if v, ok := q["before"]; ok {
		id, ok := parseCursor(v[0])
		if len(v) > 1 || !ok {
			return p, door.Refuse(http.StatusBadRequest, door.CodeBadRequest,
				"before must be one next_before of an earlier snapshot of this thread")
		}
		p.before = id
	}
	return p, nil
}

// cursorPrefix versions the cursor: it is opaque to callers, so what it
// encodes may change.
const cursorPrefix = "m1."

func cursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursorPrefix + strconv.FormatInt(id, 10)))
}

func parseCursor(s string) (int64, bool) {
	if len(s) > 64 {
		return 0, false
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, false
	}
	digits, ok := strings.CutPrefix(string(b), cursorPrefix)
	if !ok || digits == "" || digits[0] == '0' || strings.ContainsAny(digits, "+-") {
		return 0, false
	}
	id, err := strconv.ParseInt(digits, 10, 64)
	return id, err == nil && id > 0
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

func (h *Handler) snapshot(ctx context.Context, threadID string, pg page) (Snapshot, error) {
	msgs, err := h.o.Store.ThreadMessagePage(ctx, threadID, pg.before, pg.limit, MaxSnapshotBytes)
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{ThreadID: threadID, Messages: msgs.Messages, HasMore: msgs.More}
	if snap.Messages == nil {
		snap.Messages = []json.RawMessage{}
	}
	if msgs.More {
		snap.NextBefore = cursor(msgs.Before)
	}
	for _, o := range msgs.Omitted {
		snap.OmittedMessages = append(snap.OmittedMessages, OmittedMessage{MessageID: o.MessageID, Bytes: o.Bytes})
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

// writeSnapshot writes snap as door.WriteJSON would, but with the messages'
// bytes as stored: HTML escaping would make a page of "<" six times its
// bound.
func writeSnapshot(w http.ResponseWriter, snap *Snapshot) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(snap); err != nil {
		door.WriteJSON(w, http.StatusOK, snap) // answers its own failure
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

func (h *Handler) getThread(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("threadId")
	pg, err := parsePage(r)
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
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
	snap, err := h.snapshot(ctx, id, pg)
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	writeSnapshot(w, &snap)
}
