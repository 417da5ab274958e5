package identity

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

func TestFingerprint(t *testing.T) {
	pub, err := ParsePublicKey(testKeyA5)
	if err != nil {
		t.Fatal(err)
	}
	if got := Fingerprint(pub); got != "a1d577350a959ecd" {
		t.Fatalf("Fingerprint = %s, want a1d577350a959ecd", got)
	}
	if !IsFingerprint(Fingerprint(pub)) {
		t.Fatal("IsFingerprint(Fingerprint) = false")
	}
}

func TestIsFingerprint(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"a1d577350a959ecd", true},
		{"A1D577350A959ECD", false},
		{"a1d577350a959ec", false},
		{"a1d577350a959ecdd", false},
		{"a1d577350a959ecg", false},
		{"", false},
	} {
		if got := IsFingerprint(tc.in); got != tc.want {
			t.Errorf("IsFingerprint(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParsePublicKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"canonical", testKeyA5, true},
		{"uppercase", strings.ToUpper(testKeyA5), false},
		{"mixed case", "29E5833a915a6429a4e3a7948475c338ef436eb82be89c92f059704403db9d55", false},
		{"short", testKeyA5[:63], false},
		{"long", testKeyA5 + "0", false},
		{"0x prefix", "0x" + testKeyA5[:62], false},
		{"non-hex", strings.Repeat("zz", 32), false},
		{"empty", "", false},
		{"spaces", " " + testKeyA5[1:], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := ParsePublicKey(tc.in)
			if tc.ok {
				if err != nil || PublicKeyHex(pub) != tc.in {
					t.Fatalf("ParsePublicKey = %x, %v", pub, err)
				}
				if !IsPublicKeyHex(tc.in) {
					t.Fatal("IsPublicKeyHex = false")
				}
				return
			}
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("err = %v, want ErrBadKey", err)
			}
			if IsPublicKeyHex(tc.in) {
				t.Fatal("IsPublicKeyHex = true")
			}
		})
	}
}

func TestNewSignerFromSeedHex(t *testing.T) {
	s, err := NewSignerFromSeedHex(testSeedA5)
	if err != nil {
		t.Fatal(err)
	}
	if s.PublicKeyHex() != testKeyA5 || PublicKeyHex(s.PublicKey()) != testKeyA5 {
		t.Fatalf("public key = %s", s.PublicKeyHex())
	}
	// Uppercase seed hex is accepted: it is configuration, never compared as a string.
	if u, err := NewSignerFromSeedHex(strings.ToUpper(testSeedA5)); err != nil || u.PublicKeyHex() != testKeyA5 {
		t.Fatalf("uppercase seed: %v", err)
	}
	for _, bad := range []string{"", testSeedA5[:62], testSeedA5 + "a5", strings.Repeat("g", 64)} {
		if _, err := NewSignerFromSeedHex(bad); !errors.Is(err, ErrBadKey) {
			t.Errorf("NewSignerFromSeedHex(%q) err = %v, want ErrBadKey", bad, err)
		}
	}
	if _, err := NewSignerFromSeed(make([]byte, 31)); !errors.Is(err, ErrBadKey) {
		t.Errorf("31-byte seed: err = %v", err)
	}
}

func TestSignerDoesNotPrintSeed(t *testing.T) {
	s := signerOf(t, "a5")
	for _, out := range []string{s.String(), s.GoString()} {
		if strings.Contains(out, "a5a5a5") || !strings.Contains(out, testKeyA5) {
			t.Fatalf("printed signer = %q", out)
		}
	}
}

func TestVerify(t *testing.T) {
	s := signerOf(t, "a5")
	msg := []byte("funduq-cancel:run-1:1755500000")
	sig := s.Sign(msg)
	if err := Verify(s.PublicKey(), msg, sig); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	other := signerOf(t, "b6")
	for _, tc := range []struct {
		name string
		pub  ed25519.PublicKey
		msg  []byte
		sig  string
		want error
	}{
		{"other message", s.PublicKey(), []byte("funduq-cancel:run-2:1755500000"), sig, ErrBadSignature},
		{"other key", other.PublicKey(), msg, sig, ErrBadSignature},
		{"flipped", s.PublicKey(), msg, flipHex(sig, 10), ErrBadSignature},
		{"uppercase", s.PublicKey(), msg, strings.ToUpper(sig), ErrBadSignature},
		{"short", s.PublicKey(), msg, sig[:126], ErrBadSignature},
		{"empty", s.PublicKey(), msg, "", ErrBadSignature},
		{"short key", s.PublicKey()[:31], msg, sig, ErrBadKey},
		{"nil key", nil, msg, sig, ErrBadKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Verify(tc.pub, tc.msg, tc.sig); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}
