package identity

import (
	"fmt"
	"time"
)

// MakeViewHeader returns a view proof for the doors' Funduq-View header: s
// shows it reads id at ts. Compact JSON {"publicKey","timestamp","signature"}
// with the signature over ViewPayload(id, ts).
func MakeViewHeader(s *Signer, id string, ts int64) string {
	key := s.PublicKeyHex()
	sig := s.Sign(ViewPayload(id, ts))
	b := append([]byte(nil), `{"publicKey":`...)
	b = appendPyJSONString(b, key)
	b = append(b, `,"timestamp":`...)
	b = append(b, itoa(ts)...)
	b = append(b, `,"signature":`...)
	b = appendPyJSONString(b, sig)
	return string(append(b, '}'))
}

// ParseViewHeader verifies a view proof over id and returns the key it
// shows. The value must be a JSON object with exactly publicKey (canonical
// hex), timestamp (integer, within FreshnessWindow of now) and signature
// (hex, over ViewPayload(id, timestamp)). Every refusal wraps ErrBadView,
// plus ErrStale, ErrBadKey or ErrBadSignature where that is the cause.
func ParseViewHeader(value, id string, now time.Time) (publicKeyHex string, err error) {
	m, err := jsonObject([]byte(value), "publicKey", "timestamp", "signature")
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadView, err)
	}
	key, ok := jsonString(m["publicKey"])
	if !ok {
		return "", fmt.Errorf("%w: publicKey is missing or not a string", ErrBadView)
	}
	pub, err := ParsePublicKey(key)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadView, err)
	}
	ts, ok := jsonInt(m["timestamp"])
	if !ok {
		return "", fmt.Errorf("%w: timestamp is missing or not an integer", ErrBadView)
	}
	sig, ok := jsonString(m["signature"])
	if !ok {
		return "", fmt.Errorf("%w: signature is missing or not a string", ErrBadView)
	}
	if err := CheckFresh(ts, now, FreshnessWindow); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadView, err)
	}
	if err := Verify(pub, ViewPayload(id, ts), sig); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadView, err)
	}
	return key, nil
}
