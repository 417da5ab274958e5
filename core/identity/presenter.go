package identity

import (
	"fmt"
	"time"
)

// PresenterHeader is the HTTP header carrying a presenter proof: the gateway's
// way for a caller presenting an actor chain to prove which key presents it.
const PresenterHeader = "Funduq-Presenter"

// MakePresenterHeader returns the header value proving that s presents body at
// ts: compact JSON {"publicKey":…,"timestamp":…,"signature":…} with the
// signature over PresenterPayload. Sign the exact body bytes that are sent.
func MakePresenterHeader(s *Signer, ts int64, body []byte) string {
	key := s.PublicKeyHex()
	sig := s.Sign(PresenterPayload(key, ts, body))
	b := append([]byte(nil), `{"publicKey":`...)
	b = appendPyJSONString(b, key)
	b = append(b, `,"timestamp":`...)
	b = append(b, itoa(ts)...)
	b = append(b, `,"signature":`...)
	b = appendPyJSONString(b, sig)
	return string(append(b, '}'))
}

// ParsePresenterHeader verifies a Funduq-Presenter value against the exact
// request body and returns the proven public key. The value must be a JSON
// object with exactly publicKey (canonical hex), timestamp (integer, within
// FreshnessWindow of now) and signature (hex, over PresenterPayload). Every
// refusal wraps ErrBadPresenter, plus ErrStale, ErrBadKey or ErrBadSignature
// where that is the cause. Doors treat any refusal as "no presenter", never as
// an error of its own.
func ParsePresenterHeader(value string, body []byte, now time.Time) (publicKeyHex string, err error) {
	return ParsePresenterHeaderDigest(value, SHA256Hex(body), now)
}

// ParsePresenterHeaderDigest is ParsePresenterHeader against the body's
// lowercase hex sha256 (PresenterPayloadDigest) rather than the body.
func ParsePresenterHeaderDigest(value, bodySHA256Hex string, now time.Time) (publicKeyHex string, err error) {
	return parseSignedHeader(value, &now, ErrBadPresenter, func(key string, ts int64) []byte {
		return PresenterPayloadDigest(key, ts, bodySHA256Hex)
	})
}

// VerifyPresenterHeaderAnyTime is ParsePresenterHeader without the
// freshness check: the key whose signature over body the value carries,
// whenever it was made. It proves no presenter (a replayed proof passes
// it); a door uses it only to tell whose retry a stale proof is.
func VerifyPresenterHeaderAnyTime(value string, body []byte) (publicKeyHex string, err error) {
	digest := SHA256Hex(body)
	return parseSignedHeader(value, nil, ErrBadPresenter, func(key string, ts int64) []byte {
		return PresenterPayloadDigest(key, ts, digest)
	})
}

// parseSignedHeader reads a {publicKey, timestamp, signature} header shared by
// the presenter and view proofs, checks its freshness against *now (not
// at all when now is nil) and verifies the signature over
// payload(publicKey, timestamp); every failure wraps sentinel.
func parseSignedHeader(value string, now *time.Time, sentinel error, payload func(key string, ts int64) []byte) (publicKeyHex string, err error) {
	m, err := jsonObject([]byte(value), "publicKey", "timestamp", "signature")
	if err != nil {
		return "", fmt.Errorf("%w: %w", sentinel, err)
	}
	key, ok := jsonString(m["publicKey"])
	if !ok {
		return "", fmt.Errorf("%w: publicKey is missing or not a string", sentinel)
	}
	pub, err := ParsePublicKey(key)
	if err != nil {
		return "", fmt.Errorf("%w: %w", sentinel, err)
	}
	ts, ok := jsonInt(m["timestamp"])
	if !ok {
		return "", fmt.Errorf("%w: timestamp is missing or not an integer", sentinel)
	}
	sig, ok := jsonString(m["signature"])
	if !ok {
		return "", fmt.Errorf("%w: signature is missing or not a string", sentinel)
	}
	if now != nil {
		if err := CheckFresh(ts, *now, FreshnessWindow); err != nil {
			return "", fmt.Errorf("%w: %w", sentinel, err)
		}
	}
	if err := Verify(pub, payload(key, ts), sig); err != nil {
		return "", fmt.Errorf("%w: %w", sentinel, err)
	}
	return key, nil
}
