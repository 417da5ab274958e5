package identity

import (
	"errors"
	"strings"
	"testing"
)

// VerifyPresenterHeaderAnyTime takes a proof however old, and nothing that
// ParsePresenterHeader refuses for another cause.
func TestVerifyPresenterHeaderAnyTime(t *testing.T) {
	s, other := signerOf(t, "a5"), signerOf(t, "b6")
	body := []byte(`{"x":1}`)
	old := MakePresenterHeader(s, 1, body)
	if key, err := VerifyPresenterHeaderAnyTime(old, body); err != nil || key != testKeyA5 {
		t.Fatalf("a proof from 1970: key %q, err %v; want %s", key, err, testKeyA5)
	}
	forged := strings.Replace(MakePresenterHeader(other, 1, body), other.PublicKeyHex(), testKeyA5, 1)
	for name, c := range map[string]struct {
		value string
		body  []byte
	}{
		"other body":                {old, []byte(`{"x":2}`)},
		"key claims another signer": {forged, body},
		"not JSON":                  {"{", body},
	} {
		if key, err := VerifyPresenterHeaderAnyTime(c.value, c.body); !errors.Is(err, ErrBadPresenter) || key != "" {
			t.Errorf("%s: key %q, err %v; want ErrBadPresenter", name, key, err)
		}
	}
}
