package tickets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// MaxBodyBytes bounds a POST /tickets body.
const MaxBodyBytes = 4 << 10

// IssueTimeout bounds the ticket store's answer, so an unreachable or hung
// Redis is a prompt 503 with Retry-After rather than a hang (D13). The
// store's client must honour context deadlines (go-redis:
// ContextTimeoutEnabled, as the broker node sets it).
const IssueTimeout = 1500 * time.Millisecond

// Handler serves POST /tickets (spec §4.2): body {"publicKey": "<64 lowercase
// hex>"} ("public_key" is accepted too), answer 201 {"ticket",
// "funduqPublicKey"}. Issuing is the admission decision and is left
// unauthenticated here; put edge auth in front of it if the deployment wants
// it. The handler does not look at the path: mount it where it belongs.
//
// Errors are JSON {"error": "..."}: 400 for a bad body, 405 for another
// method, 413 for a body over MaxBodyBytes, 503 with Retry-After: 1 when the
// ticket store fails (the cause is logged, not sent). log may be nil.
// funduqKeyHex must be a canonical public key; Handler panics otherwise, as
// that is a wiring mistake.
func Handler(store *Store, funduqKeyHex string, log *slog.Logger) http.Handler {
	if _, err := identity.ParsePublicKey(funduqKeyHex); err != nil {
		panic(fmt.Sprintf("tickets.Handler: funduq key: %v", err))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &handler{store: store, funduqKey: funduqKeyHex, log: log}
}

type handler struct {
	store     *Store
	funduqKey string
	log       *slog.Logger
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use POST")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body is larger than %d bytes", MaxBodyBytes))
			return
		}
		writeError(w, http.StatusBadRequest, "could not read the body")
		return
	}
	key, msg := parseBody(body)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	ictx, cancel := context.WithTimeout(r.Context(), IssueTimeout)
	ticket, err := h.store.Issue(ictx, key)
	cancel()
	if err != nil {
		h.log.ErrorContext(r.Context(), "tickets: issue failed", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "ticket store unavailable; retry shortly")
		return
	}
	writeJSON(w, http.StatusCreated, wire.TicketResponse{Ticket: ticket, FunduqPublicKey: h.funduqKey})
}

// parseBody returns the requested key, or a message saying what is wrong.
func parseBody(body []byte) (key, msg string) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil || obj == nil {
		return "", `body must be a JSON object {"publicKey": "<64 lowercase hex chars>"}`
	}
	var got []string
	for _, field := range []string{"publicKey", "public_key"} {
		raw, ok := obj[field]
		if !ok {
			continue
		}
		var s string
		if string(raw) == "null" || json.Unmarshal(raw, &s) != nil {
			return "", field + " must be a string"
		}
		got = append(got, s)
	}
	switch {
	case len(got) == 0:
		return "", "publicKey is required"
	case len(got) == 2 && got[0] != got[1]:
		return "", "publicKey and public_key disagree"
	case got[0] == "":
		return "", "publicKey is empty"
	}
	if _, err := identity.ParsePublicKey(got[0]); err != nil {
		return "", "publicKey: " + strings.TrimPrefix(err.Error(), identity.ErrBadKey.Error()+": ")
	}
	return got[0], ""
}

type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // cannot happen for the types above
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
