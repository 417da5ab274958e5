package identity

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A view proof names the id it reads and its time; any other id, a stale
// time, another signer's signature or a repeated key proves nothing.
func TestViewHeader(t *testing.T) {
	s, other := signerOf(t, "a5"), signerOf(t, "b6")
	ts := int64(1755500000)
	now := time.Unix(ts, 0)
	v := MakeViewHeader(s, "run_2c26b46b68ffc68ff99b453c", ts)
	want := `{"publicKey":"` + testKeyA5 + `","timestamp":1755500000,"signature":"` + s.Sign(ViewPayload("run_2c26b46b68ffc68ff99b453c", ts)) + `"}`
	if v != want {
		t.Fatalf("header\n got  %s\n want %s", v, want)
	}
	if key, err := ParseViewHeader(v, "run_2c26b46b68ffc68ff99b453c", now); err != nil || key != testKeyA5 {
		t.Fatalf("good proof: %q %v", key, err)
	}
	forged := strings.Replace(v, testKeyA5, other.PublicKeyHex(), 1)
	dup := strings.Replace(v, `}`, `,"publicKey":"`+other.PublicKeyHex()+`"}`, 1)
	for name, c := range map[string]struct {
		value, id string
		now       time.Time
	}{
		"another id":       {v, "run_other", now},
		"stale":            {v, "run_2c26b46b68ffc68ff99b453c", now.Add(61 * time.Second)},
		"another signer":   {forged, "run_2c26b46b68ffc68ff99b453c", now},
		"a repeated key":   {dup, "run_2c26b46b68ffc68ff99b453c", now},
		"not json":         {"nope", "run_2c26b46b68ffc68ff99b453c", now},
		"empty":            {"", "run_2c26b46b68ffc68ff99b453c", now},
		"timestamp a text": {strings.Replace(v, "1755500000", `"1755500000"`, 1), "run_2c26b46b68ffc68ff99b453c", now},
	} {
		if key, err := ParseViewHeader(c.value, c.id, c.now); err == nil || !errors.Is(err, ErrBadView) || key != "" {
			t.Errorf("%s: %q %v", name, key, err)
		}
	}
}

func FuzzParseViewHeader(f *testing.F) {
	s := signerOf(f, "a5")
	ts := int64(1755500000)
	good := MakeViewHeader(s, "run_x", ts)
	f.Add(good, "run_x")
	f.Add(good, "run_y")
	f.Add(MakeViewHeader(s, "run_x", ts-61), "run_x")
	f.Add(`{"publicKey":null,"timestamp":null,"signature":null}`, "")
	now := time.Unix(ts, 0)
	f.Fuzz(func(t *testing.T, value, id string) {
		key, err := ParseViewHeader(value, id, now)
		if err != nil {
			if !errors.Is(err, ErrBadView) || key != "" {
				t.Fatalf("refusal %q, %v", key, err)
			}
			return
		}
		if !IsPublicKeyHex(key) {
			t.Fatalf("accepted key %q", key)
		}
	})
}
