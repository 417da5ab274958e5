package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FreshnessWindow is the one window every timestamped family uses (kyok-call,
// cancel, view, presenter): a timestamp within ±60 s of the verifier's clock.
const FreshnessWindow = 60 * time.Second

// Domain tags. Each family has its own so that no signature is ever valid as
// another family's.
const (
	tagProviderConnect = "funduq-connect-provider"
	tagFunduqConnect   = "funduq-connect-funduq"
	tagKyokCall        = "funduq-kyok-call"
	tagCancel          = "funduq-cancel"
	tagView            = "funduq-view"
	tagResolve         = "funduq-resolve"
	tagPresenter       = "funduq-server-presenter"
)

// SHA256Hex is the lowercase hex SHA-256 of b.
func SHA256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// payload joins fields with ':' and no escaping, exactly as upstream does; all
// fields are hex, decimal or ids, so the join is unambiguous in practice.
func payload(fields ...string) []byte { return []byte(strings.Join(fields, ":")) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// ProviderConnectPayload is what a provider signs to open a link:
// funduq-connect-provider:{funduqKey}:{ticket}:{providerNonce}. funduqKeyHex is
// the recipient (funduq's own key when verifying), so a proof made for another
// funduq does not verify here.
func ProviderConnectPayload(funduqKeyHex, ticket, providerNonce string) []byte {
	return payload(tagProviderConnect, funduqKeyHex, ticket, providerNonce)
}

// FunduqConnectPayload is funduq's handshake answer: funduq-connect-funduq:{ticket}:{providerNonce}.
func FunduqConnectPayload(ticket, providerNonce string) []byte {
	return payload(tagFunduqConnect, ticket, providerNonce)
}

// KyokCallPayload is what an agent provider signs per KYOK call:
// funduq-kyok-call:{token}:{ts}:{sha256hex(body)}, hashing the exact body bytes sent.
func KyokCallPayload(token string, timestamp int64, body []byte) []byte {
	return payload(tagKyokCall, token, itoa(timestamp), SHA256Hex(body))
}

// CancelPayload: funduq-cancel:{runId}:{ts}.
func CancelPayload(runID string, ts int64) []byte {
	return payload(tagCancel, runID, itoa(ts))
}

// ViewPayload: funduq-view:{runId}:{ts}.
func ViewPayload(runID string, ts int64) []byte {
	return payload(tagView, runID, itoa(ts))
}

// ResolutionPayload: funduq-resolve:{runId}:{H}, H = sha256 hex of the ask ids
// sorted bytewise and joined with one NUL (no trailing NUL); the empty set
// hashes the empty string. Sorting is the builder's job so callers may pass ids
// in any order; askIDs itself is not modified.
func ResolutionPayload(runID string, askIDs []string) []byte {
	ids := slices.Clone(askIDs)
	slices.Sort(ids) // Go string order is bytewise, like Python's sorted() on these ids
	return payload(tagResolve, runID, SHA256Hex([]byte(strings.Join(ids, "\x00"))))
}

// PresenterPayload is the gateway's presenter proof:
// funduq-server-presenter:{publicKey}:{ts}:{sha256hex(body)}. The key inside the
// payload makes the proof name the key it claims.
func PresenterPayload(publicKeyHex string, ts int64, body []byte) []byte {
	return PresenterPayloadDigest(publicKeyHex, ts, SHA256Hex(body))
}

// PresenterPayloadDigest is PresenterPayload given the body's lowercase hex
// sha256 instead of the body: what an API Gateway authorizer, which never
// sees the body, verifies against the digest the caller declares.
func PresenterPayloadDigest(publicKeyHex string, ts int64, bodySHA256Hex string) []byte {
	return payload(tagPresenter, publicKeyHex, itoa(ts), bodySHA256Hex)
}

// CheckFresh refuses (wrapping ErrStale) a Unix-seconds timestamp more than
// window away from now in either direction; the boundary itself is fresh.
// Comparison uses now's full precision, like the reference's float clock.
func CheckFresh(ts int64, now time.Time, window time.Duration) error {
	nowS := now.Unix()
	w := int64(window / time.Second)
	// Coarse check first, so an absurd ts never reaches time.Unix arithmetic.
	if ts > nowS+w+1 || ts < nowS-w-1 {
		return fmt.Errorf("%w: timestamp %d is outside ±%s of %d", ErrStale, ts, window, nowS)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > window || d < -window {
		return fmt.Errorf("%w: timestamp %d is %s from now, window ±%s", ErrStale, ts, d, window)
	}
	return nil
}
