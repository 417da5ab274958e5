package agui

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/door"
)

// resentOverhead is what a stored message may hold beyond the same
// message as a client sends it: the null members of its role's layout,
// funduq's id in place of the client's (core/runinput).
const resentOverhead = 256

// resent is how many of msgs, from the first, repeat thread's stored
// record: a client such as @ag-ui/client's HttpAgent sends, on every turn,
// the whole conversation it holds, and what it repeats was said already
// (design.md §The doors, "The history an AG-UI client sends again").
//
// It is every stored message when msgs holds more than the thread does
// and opens with all of them, in order, each the same message (sameMessage);
// otherwise 0, and everything the request carries is the caller's new
// turn, as before. So a message is dropped only as one of a whole copy of
// the record, and whatever follows that copy is stored however much it
// repeats: a caller sending only its new message ("yes" once more) has it
// stored.
//
// Only for a caller who may read the thread (D16): anyone else's request
// is taken as sent, so what the record holds decides nothing for it.
func (h *Handler) resent(ctx context.Context, thread store.Thread, caller string, msgs []json.RawMessage, bodyLen int) (int, error) {
	if len(msgs) < 2 || !door.MayRead(thread, door.Viewer{Caller: caller}) {
		return 0, nil
	}
	// A request repeats at most what it carries, and its messages are at
	// most its body: a record larger than that is not read.
	sctx, cancel := door.Step(ctx)
	stored, ok, err := h.o.Store.ThreadOpening(sctx, thread.ThreadID, len(msgs), 2*bodyLen+resentOverhead*len(msgs))
	cancel()
	if err != nil || !ok || len(stored) == 0 || len(stored) >= len(msgs) {
		return 0, err
	}
	for i, s := range stored {
		if !sameMessage(s, msgs[i]) {
			return 0, nil
		}
	}
	return len(stored), nil
}

// sameMessage reports whether sent, a message of a request, is stored as
// s: the same members, a member that is null or missing being the same
// (a caller's message is stored with every member its role names, null
// when not sent), compared as JSON values. The id is compared only for an
// agent's message, stored under the agent's own id, which the client
// holds from the stream; a caller's message is stored under funduq's.
func sameMessage(s store.StoredMessage, sent json.RawMessage) bool {
	a, ok1 := members(s.Message)
	b, ok2 := members(sent)
	if !ok1 || !ok2 {
		return false
	}
	if s.Origin != "agent" {
		delete(a, "id")
		delete(b, "id")
	} else if a["id"] == nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// members decodes a message's members, numbers as written, leaving out
// those that are null.
func members(raw json.RawMessage) (map[string]any, bool) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, false
	}
	for k, v := range m {
		if v == nil {
			delete(m, k)
		}
	}
	return m, true
}
