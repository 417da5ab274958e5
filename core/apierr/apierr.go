// Package apierr is funduq's one HTTP error body, {"error": {"code": …,
// "message": …}}, and the JSON writer every HTTP answer goes through. The
// doors and the broker node's own endpoints (POST /tickets, the provider and
// KYOK links' upgrades, a standby's answer) write it alike (design.md D13),
// so a client reads every refusal one way and branches on its code.
package apierr

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Codes the broker node's endpoints answer with; the doors' own are in
// functions/door.
const (
	CodeBadRequest       = "bad_request"
	CodeBodyTooLarge     = "body_too_large"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeRateLimited      = "rate_limited"
	CodeUnavailable      = "storage_unavailable"
	CodeNotLeader        = "not_leader"
	// CodePendingLinksFull: the leader holds FUNDUQ_MAX_PENDING_LINKS
	// links that have not registered; a provider tries again later.
	CodePendingLinksFull = "too_many_pending_links"
	// CodeIdentityKeyMismatch: this node's FUNDUQ_IDENTITY_KEY is not the
	// one the leader published, so it issues no ticket (design.md
	// §Deployment, "One identity key"); the doors refuse bound runs with
	// the same code.
	CodeIdentityKeyMismatch = "identity_key_mismatch"
	CodeInternal            = "internal"
)

// Body is the error body.
type Body struct {
	Error Detail `json:"error"`
	// Leader, on a standby broker node's 503, is the leader's advertised
	// URL, where a provider should dial instead.
	Leader string `json:"leader,omitempty"`
}

// Detail is what the body says: a stable code to branch on and a message
// for people.
type Detail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// New is a Body with code and the formatted message.
func New(code, format string, args ...any) Body {
	return Body{Error: Detail{Code: code, Message: fmt.Sprintf(format, args...)}}
}

// Write answers status with b.
func Write(w http.ResponseWriter, status int, b Body) { WriteJSON(w, status, b) }

// WriteJSON answers status with v as JSON, not to be cached; a value that
// does not encode is answered 500 internal.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
