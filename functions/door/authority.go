package door

import (
	"encoding/json"
	"net/http"
	"slices"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// Who may read, answer and retry (D16, D17). A thread bound to an authority
// (its head key set) answers only its parties: the head, the presenter
// recorded at its birth, and the agent's provider. A reader shows a key by
// the authorizer seat (Options.AuthorizedKey, the one place the
// authenticated caller key comes from), by a Funduq-Presenter proof over the
// exact body, or by a view proof over the id it reads. Anyone else gets
// exactly the answer an unknown id gets.

// ViewHeader carries a view proof: compact JSON {publicKey, timestamp,
// signature}, Ed25519 (hex) over identity.ViewPayload(id, timestamp), where
// id is the thread, run or task id the request reads (a context id for
// ListTasks), and the timestamp is within identity.FreshnessWindow.
const ViewHeader = "Funduq-View"

// LegacyViewHeader is the reference's name for the same proof (rev 13–20),
// accepted too.
const LegacyViewHeader = "X-Funduq-View"

// Error codes of the authority checks.
const (
	CodeInvalidResolution    = "invalid_resolution"
	CodeIdempotencyKeyReused = "idempotency_key_reused"
)

// CallerKey is the authenticated key behind a request: the authorizer seat
// (authorized may be nil), else a valid Funduq-Presenter proof over body;
// "" for an anonymous caller. It scopes idempotency keys and, on reads, is
// one of the keys a party may show.
func CallerKey(r *http.Request, body []byte, authorized func(*http.Request) string, now time.Time) string {
	return PresenterKey(r, body, authorized, now)
}

// ViewProofKey is the key a valid view proof over id shows ("" when the
// request carries none, or one that does not verify, is stale, or is over
// another id). Never an error: a failed proof is as good as none.
func ViewProofKey(r *http.Request, id string, now time.Time) string {
	v := r.Header.Get(ViewHeader)
	if v == "" {
		v = r.Header.Get(LegacyViewHeader)
	}
	if v == "" || id == "" {
		return ""
	}
	k, err := identity.ParseViewHeader(v, id, now)
	if err != nil {
		return ""
	}
	return k
}

// Viewer is who shows themselves on a read: the caller key and the key of
// a view proof over the id read (either may be "").
type Viewer struct {
	Caller string
	Proof  string
}

// ViewerOf reads both seats of a request reading id.
func ViewerOf(r *http.Request, body []byte, id string, authorized func(*http.Request) string, now time.Time) Viewer {
	return Viewer{Caller: CallerKey(r, body, authorized, now), Proof: ViewProofKey(r, id, now)}
}

// Parties are the keys that may read a bound thread: its head, the
// presenter recorded on it, and the agent's provider. nil for an unbound
// thread (anyone holding its id reads it).
func Parties(t store.Thread) []string {
	if t.HeadKey == "" {
		return nil
	}
	out := []string{t.HeadKey, t.ProviderKey}
	if t.PresenterKey != "" && t.PresenterKey != t.HeadKey {
		out = append(out, t.PresenterKey)
	}
	return out
}

// MayRead reports whether v may read thread t: always for an unbound
// thread, else only a party.
func MayRead(t store.Thread, v Viewer) bool {
	if t.HeadKey == "" {
		return true
	}
	p := Parties(t)
	return v.Caller != "" && slices.Contains(p, v.Caller) || v.Proof != "" && slices.Contains(p, v.Proof)
}

// ResolutionProof is a signed answer to a pause (bag key "resolution"):
// Ed25519 by PublicKey over identity.ResolutionPayload(root, open ask ids).
type ResolutionProof struct {
	PublicKey string `json:"publicKey"`
	Signature string `json:"signature"`
}

// CheckResolution verifies the bag's resolution proof for answering the
// paused run root whose open asks are asks; the signer must be one of
// allowed (the asking run's head and the agent's provider). Errors are
// *Error 401 invalid_resolution, the same on both doors.
func CheckResolution(bag CallerBag, root string, asks []string, allowed []string) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", Refuse(http.StatusUnauthorized, CodeInvalidResolution, format, args...)
	}
	raw, ok := presentMember(bag.Obj, "resolution")
	if !ok || jsonFirstByte(raw) != '{' {
		return bad("this thread is bound to an authority: an answer needs resolution = {publicKey, signature} signed over funduq-resolve:%s:{sha256 of its open ask ids}", root)
	}
	var p ResolutionProof
	if err := json.Unmarshal(raw, &p); err != nil {
		return bad("resolution must be {publicKey: 64-hex string, signature: 128-hex string}")
	}
	pub, err := identity.ParsePublicKey(p.PublicKey)
	if err != nil {
		return bad("resolution.publicKey: %v", err)
	}
	if err := identity.Verify(pub, identity.ResolutionPayload(root, asks), p.Signature); err != nil {
		return bad("resolution.signature does not verify over the open asks of %s", root)
	}
	if !slices.Contains(allowed, p.PublicKey) {
		return bad("the resolution is signed by a key that is neither the segment head nor the agent's provider")
	}
	return p.PublicKey, nil
}

// IdempotencyScope is the stored form of a caller's Idempotency-Key: the
// key within its caller (D17), so two callers' keys never meet. An
// anonymous caller's key is matched together with the request's hash.
func IdempotencyScope(callerKey, key string) string {
	if key == "" {
		return ""
	}
	if callerKey == "" {
		return "anon:" + key
	}
	return "key:" + callerKey + ":" + key
}

// KeyReused is the refusal of an Idempotency-Key (or a caller request id)
// the same caller already used for a different request.
func KeyReused(what string) *Error {
	return Refuse(http.StatusUnprocessableEntity, CodeIdempotencyKeyReused,
		"%s was already used for a different request; use a new one", what)
}
