package door

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// A retry whose presenter proof went stale (docs/design.md §The doors): a
// Funduq-Presenter proof that verifies but is outside its window is no
// authority (never an error by itself either), yet its key tells whose
// retry the request may be. When its presenter made the request
// before, the request is refused, typed, rather than run again as an
// anonymous caller's (D13); otherwise it goes on as anonymous.

// CodePresenterProofStale refuses a retry of its presenter's whose
// Funduq-Presenter proof went stale.
const CodePresenterProofStale = "presenter_proof_stale"

// StalePresenterKey is the key of the request's Funduq-Presenter proof
// when it verifies over body but is outside its window; "" for any other
// proof, or none. It shows nothing: RefuseStaleRetry alone reads it.
func StalePresenterKey(r *http.Request, body []byte, now time.Time) string {
	v := r.Header.Get(identity.PresenterHeader)
	if v == "" {
		return ""
	}
	if _, err := identity.ParsePresenterHeader(v, body, now); !errors.Is(err, identity.ErrStale) {
		return ""
	}
	k, err := identity.VerifyPresenterHeaderAnyTime(v, body)
	if err != nil {
		return ""
	}
	return k
}

// RefuseStaleRetry refuses, 401 presenter_proof_stale, a request of an
// anonymous caller whose stale proof's presenter (Caller.Stale) made it
// before: probe, the request's retry look-up for a caller (Probe),
// finds a run in that presenter's scope — the same request, or another
// under one of its keys (which, re-signed, is refused 422). nil
// otherwise: the request goes on as anonymous. Nothing is written, and
// nothing found is answered: a replay of the exact request learns nothing
// it did not hold.
func RefuseStaleRetry(ctx context.Context, st *store.Store, c Caller, probe func(Caller) store.NewRun) error {
	if c.Key != "" || c.Stale == "" {
		return nil
	}
	_, ok, err := FindRetried(ctx, st, probe(Caller{Key: c.Stale}))
	switch {
	case errors.Is(err, store.ErrKeyReused):
	case err != nil:
		return err
	case !ok:
		return nil
	}
	return Refuse(http.StatusUnauthorized, CodePresenterProofStale,
		"the %s proof is outside its ±%d s window; re-sign it and send the request again",
		identity.PresenterHeader, int(identity.FreshnessWindow/time.Second))
}
