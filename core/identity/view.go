package identity

import "time"

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
	return parseSignedHeader(value, &now, ErrBadView, func(_ string, ts int64) []byte { return ViewPayload(id, ts) })
}
