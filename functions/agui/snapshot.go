package agui

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/funduq/funduq-go/core/agui"
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
// than the position its cursor seals (none: the newest).
type page struct {
	limit  int
	cursor *sealedCursor
}

var newestPage = page{limit: MaxSnapshotMessages}

// badCursor is the one refusal of a ?before= funduq did not make for this
// thread, whether its shape or its seal is wrong.
func badCursor() error {
	return door.Refuse(http.StatusBadRequest, door.CodeBadRequest,
		"before must be one next_before of an earlier snapshot of this thread")
}

// parsePage reads ?limit= and ?before= of GET /threads/{id}. A refusal
// depends on the query alone, never on the thread, so it tells a stranger
// nothing (D16); a cursor's seal is checked only once the caller may read
// the thread (openCursor).
func parsePage(r *http.Request) (page, error) {
	p := newestPage
	q := r.URL.Query()
	n, err := door.PageLimit(q, p.limit, MaxSnapshotMessages)
	if err != nil {
		return p, err
	}
	p.limit = n
	if v, ok := q["before"]; ok {
		c, ok := parseCursor(v[0])
		if len(v) > 1 || !ok {
			return p, badCursor()
		}
		p.cursor = &c
	}
	return p, nil
}

// A cursor is one AES block, sealed under its thread's own key
// (store.Thread.CursorKey, never sent): the message's thread_messages.id,
// big-endian, then cursorCheckSize zero bytes. The id is a sequence every
// thread shares, so in the clear two of a thread's cursors would tell its
// parties how many messages all other threads gained between them; sealed,
// a cursor says nothing but "the same position" when equal, and one from
// another thread (another key) fails the check (design.md §The doors, "A
// thread snapshot is one bounded page"). A cursor carries no version: a
// different encoding would have a different length.
type sealedCursor [aes.BlockSize]byte

// cursorCheckSize is the zero bytes a cursor's id is sealed with: one not
// made under the thread's key opens to them by chance once in 2^64.
const cursorCheckSize = aes.BlockSize - 8

var cursorEncoding = base64.RawURLEncoding.Strict()

func sealCursor(key []byte, id int64) (string, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return "", fmt.Errorf("thread cursor key: %w", err)
	}
	var c sealedCursor
	binary.BigEndian.PutUint64(c[:8], uint64(id))
	b.Encrypt(c[:], c[:])
	return cursorEncoding.EncodeToString(c[:]), nil
}

// parseCursor checks a cursor's shape, from the query alone.
func parseCursor(s string) (sealedCursor, bool) {
	var c sealedCursor
	if len(s) != cursorEncoding.EncodedLen(len(c)) {
		return c, false
	}
	n, err := cursorEncoding.Decode(c[:], []byte(s))
	return c, err == nil && n == len(c)
}

// openCursor returns the message id c seals under key, or false when
// funduq did not seal it under this key.
func openCursor(key []byte, c sealedCursor) (int64, bool, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return 0, false, fmt.Errorf("thread cursor key: %w", err)
	}
	var plain sealedCursor
	b.Decrypt(plain[:], c[:])
	var zero [cursorCheckSize]byte
	if subtle.ConstantTimeCompare(plain[8:], zero[:]) != 1 {
		return 0, false, nil
	}
	id := int64(binary.BigEndian.Uint64(plain[:8]))
	return id, id > 0, nil
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

// snapshot reads th's snapshot page pg. th is the thread row as the door
// read it to authorize the caller: its cursor key comes with it, so a
// cursor costs no further read.
func (h *Handler) snapshot(ctx context.Context, th store.Thread, pg page) (Snapshot, error) {
	threadID := th.ThreadID
	var before int64
	if pg.cursor != nil {
		id, ok, err := openCursor(th.CursorKey, *pg.cursor)
		if err != nil {
			return Snapshot{}, err
		}
		if !ok {
			return Snapshot{}, badCursor()
		}
		before = id
	}
	sctx, cancel := door.Step(ctx)
	msgs, err := h.o.Store.ThreadMessagePage(sctx, threadID, before, pg.limit, MaxSnapshotBytes)
	cancel()
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{ThreadID: threadID, Messages: make([]json.RawMessage, 0, len(msgs.Messages)), HasMore: msgs.More}
	for _, m := range msgs.Messages {
		snap.Messages = append(snap.Messages, withoutOptionalNulls(m))
	}
	if msgs.More {
		if snap.NextBefore, err = sealCursor(th.CursorKey, msgs.Before); err != nil {
			return Snapshot{}, err
		}
	}
	for _, o := range msgs.Omitted {
		snap.OmittedMessages = append(snap.OmittedMessages, OmittedMessage{MessageID: o.MessageID, Bytes: o.Bytes})
	}
	active, ok, err := h.newestRun(ctx, threadID, activeStatuses...)
	if err != nil {
		return Snapshot{}, err
	}
	if ok {
		snap.ActiveRun = &RunRef{RunID: active.RunID, Status: string(active.Status)}
	}
	waiting, ok, err := h.newestRun(ctx, threadID, run.InputRequired)
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

// withoutOptionalNulls is stored message m as an AG-UI caller reads it:
// without the null members AG-UI 1.0 refuses for an optional member, as a
// relayed MESSAGES_SNAPSHOT's messages are (core/agui's one table of
// AG-UI's shapes), every other member as stored. A caller's message is
// stored with every key its role's model names, null when not sent
// (core/runinput, for strict providers); handed back, those nulls are
// members the caller never sent that @ag-ui/core's MessageSchema refuses
// (design.md §The doors, "The thread snapshot"). One pass over the
// message, none over one without a null.
func withoutOptionalNulls(m json.RawMessage) json.RawMessage {
	if !bytes.Contains(m, []byte("null")) {
		return m
	}
	out, err := agui.DropMessageOptionalNulls(m)
	if err != nil {
		return m
	}
	return out
}

// newestRun is store.NewestRunInStatus as one step of a request.
func (h *Handler) newestRun(ctx context.Context, threadID string, statuses ...run.Status) (store.Run, bool, error) {
	ctx, cancel := door.Step(ctx)
	defer cancel()
	return h.o.Store.NewestRunInStatus(ctx, threadID, statuses...)
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
	// The request's budget; each storage call has a door.Step of it.
	ctx, cancel := context.WithTimeout(r.Context(), 2*door.StorageTimeout)
	defer cancel()
	gctx, gcancel := door.Step(ctx)
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
	snap, err := h.snapshot(ctx, th, pg)
	if err != nil {
		door.WriteError(w, r, h.log, err)
		return
	}
	writeSnapshot(w, &snap)
}
