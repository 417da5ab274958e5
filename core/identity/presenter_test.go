package identity

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPresenterHeaderRoundTrip(t *testing.T) {
	s := signerOf(t, "a5")
	body := []byte(`{"threadId":"t-1","runId":"run-1"}`)
	ts := int64(1755500000)
	v := MakePresenterHeader(s, ts, body)
	want := `{"publicKey":"` + testKeyA5 + `","timestamp":1755500000,"signature":"` + s.Sign(PresenterPayload(testKeyA5, ts, body)) + `"}`
	if v != want {
		t.Fatalf("header\n got  %s\n want %s", v, want)
	}
	for _, now := range []time.Time{time.Unix(ts, 0), time.Unix(ts+60, 0), time.Unix(ts-60, 0)} {
		key, err := ParsePresenterHeader(v, body, now)
		if err != nil || key != testKeyA5 {
			t.Fatalf("at %v: key %q, err %v", now.Unix(), key, err)
		}
	}
	// Field order and whitespace are JSON's business, not the proof's.
	sig := s.Sign(PresenterPayload(testKeyA5, ts, body))
	reordered := `{ "signature": "` + sig + `", "timestamp": 1755500000, "publicKey": "` + testKeyA5 + `" }`
	if key, err := ParsePresenterHeader(reordered, body, time.Unix(ts, 0)); err != nil || key != testKeyA5 {
		t.Fatalf("reordered: %q, %v", key, err)
	}
}

func TestParsePresenterHeaderRefuses(t *testing.T) {
	s, other := signerOf(t, "a5"), signerOf(t, "b6")
	body := []byte(`{"x":1}`)
	ts := int64(1755500000)
	now := time.Unix(ts, 0)
	good := MakePresenterHeader(s, ts, body)
	sig := s.Sign(PresenterPayload(testKeyA5, ts, body))
	value := func(key, tsJSON, sig string) string {
		return `{"publicKey":"` + key + `","timestamp":` + tsJSON + `,"signature":"` + sig + `"}`
	}
	for _, tc := range []struct {
		name  string
		value string
		body  []byte
		now   time.Time
		cause error
	}{
		{"other body", good, []byte(`{"x":2}`), now, ErrBadSignature},
		{"body re-serialized", good, []byte(`{"x": 1}`), now, ErrBadSignature},
		{"stale", good, body, now.Add(61 * time.Second), ErrStale},
		{"future", good, body, now.Add(-61 * time.Second), ErrStale},
		{"key claims another signer", value(other.PublicKeyHex(), "1755500000", sig), body, now, ErrBadSignature},
		{"timestamp edited", value(testKeyA5, "1755500001", sig), body, now, ErrBadSignature},
		{"uppercase key", value(strings.ToUpper(testKeyA5), "1755500000", sig), body, now, ErrBadKey},
		{"uppercase signature", value(testKeyA5, "1755500000", strings.ToUpper(sig)), body, now, ErrBadSignature},
		{"timestamp a string", value(testKeyA5, `"1755500000"`, sig), body, now, nil},
		{"timestamp a float", value(testKeyA5, "1755500000.0", sig), body, now, nil},
		{"timestamp exponent", value(testKeyA5, "1.7555e9", sig), body, now, nil},
		{"timestamp null", value(testKeyA5, "null", sig), body, now, nil},
		{"missing signature", `{"publicKey":"` + testKeyA5 + `","timestamp":1755500000}`, body, now, nil},
		{"missing publicKey", `{"timestamp":1755500000,"signature":"` + sig + `"}`, body, now, nil},
		{"missing timestamp", `{"publicKey":"` + testKeyA5 + `","signature":"` + sig + `"}`, body, now, nil},
		{"extra field", strings.TrimSuffix(good, "}") + `,"chain":[]}`, body, now, nil},
		{"not JSON", "publicKey=" + testKeyA5, body, now, nil},
		{"JSON null", "null", body, now, nil},
		{"JSON array", "[]", body, now, nil},
		{"empty", "", body, now, nil},
		{"trailing garbage", good + "x", body, now, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParsePresenterHeader(tc.value, tc.body, tc.now)
			if !errors.Is(err, ErrBadPresenter) || key != "" {
				t.Fatalf("key %q, err %v; want ErrBadPresenter", key, err)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("err %v, want it to wrap %v", err, tc.cause)
			}
		})
	}
}

// A valid proof by another key proves that key, never the one a caller hoped for.
func TestPresenterHeaderNamesItsSigner(t *testing.T) {
	other := signerOf(t, "b6")
	key, err := ParsePresenterHeader(MakePresenterHeader(other, 1755500000, nil), nil, time.Unix(1755500000, 0))
	if err != nil || key != testKeyB6 {
		t.Fatalf("key %q, err %v", key, err)
	}
}
