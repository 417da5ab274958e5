package identity

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Canonical hex lengths. Keys and signatures travel as lowercase hex because
// several checks compare key strings for equality (ticket ↔ key, hop ↔ presenter);
// accepting other spellings would let two strings name one key.
const (
	PublicKeyHexLen = 2 * ed25519.PublicKeySize // 64
	SeedHexLen      = 2 * ed25519.SeedSize      // 64
	SignatureHexLen = 2 * ed25519.SignatureSize // 128
	FingerprintLen  = 16
)

// isLowerHex reports whether s is exactly n chars of [0-9a-f].
func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isLowerHexDigit(s[i]) {
			return false
		}
	}
	return true
}

func isLowerHexDigit(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }

// describeHex explains why s is not n lowercase hex chars without echoing s,
// which may be large or attacker-chosen.
func describeHex(s string, n int) string {
	if len(s) != n {
		return fmt.Sprintf("got %d chars", len(s))
	}
	for i := 0; i < len(s); i++ {
		if !isLowerHexDigit(s[i]) {
			return fmt.Sprintf("char %d is not lowercase hex", i)
		}
	}
	return "ok"
}

// IsPublicKeyHex reports whether s is a canonical public key: 64 lowercase hex chars.
func IsPublicKeyHex(s string) bool { return isLowerHex(s, PublicKeyHexLen) }

// IsFingerprint reports whether s has the shape of a Fingerprint: 16 lowercase hex chars.
func IsFingerprint(s string) bool { return isLowerHex(s, FingerprintLen) }

// ParsePublicKey decodes a canonical public key (exactly 64 lowercase hex chars).
// Errors wrap ErrBadKey.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	if !IsPublicKeyHex(s) {
		return nil, fmt.Errorf("%w: public key must be %d lowercase hex chars: %s",
			ErrBadKey, PublicKeyHexLen, describeHex(s, PublicKeyHexLen))
	}
	b, _ := hex.DecodeString(s) // cannot fail: checked above
	return ed25519.PublicKey(b), nil
}

// PublicKeyHex renders a public key as lowercase hex.
func PublicKeyHex(pub ed25519.PublicKey) string { return hex.EncodeToString(pub) }

// Fingerprint is the first 16 lowercase hex chars of sha256 over the raw key
// bytes (not the hex string). It names a provider in URLs and is never
// authoritative: compare full keys for any decision.
func Fingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:FingerprintLen/2])
}

// Signer holds one Ed25519 private key. Its String and GoString print only the
// public key, so logging a Signer never leaks the seed.
type Signer struct {
	priv   ed25519.PrivateKey
	pubHex string
}

// NewSignerFromSeed builds a Signer from a 32-byte seed. The seed is copied.
func NewSignerFromSeed(seed []byte) (*Signer, error) {
	if len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("%w: seed is %d bytes, want %d", ErrBadKey, len(seed), ed25519.SeedSize)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	return &Signer{priv: priv, pubHex: hex.EncodeToString(priv.Public().(ed25519.PublicKey))}, nil
}

// NewSignerFromSeedHex builds a Signer from the hex of a 32-byte seed (64 hex
// chars, either case, as in FUNDUQ_IDENTITY_KEY). Errors wrap ErrBadKey
// and never contain the seed.
func NewSignerFromSeedHex(seedHex string) (*Signer, error) {
	if len(seedHex) != SeedHexLen {
		return nil, fmt.Errorf("%w: seed must be %d hex chars, got %d chars", ErrBadKey, SeedHexLen, len(seedHex))
	}
	seed, err := hex.DecodeString(seedHex)
	if err != nil {
		return nil, fmt.Errorf("%w: seed is not hex", ErrBadKey)
	}
	return NewSignerFromSeed(seed)
}

// PublicKey returns a copy of the signer's public key.
func (s *Signer) PublicKey() ed25519.PublicKey {
	return append(ed25519.PublicKey(nil), s.priv.Public().(ed25519.PublicKey)...)
}

// PublicKeyHex returns the signer's public key as lowercase hex.
func (s *Signer) PublicKeyHex() string { return s.pubHex }

// Sign returns the lowercase hex of the Ed25519 signature over payload.
// Ed25519 is deterministic, so equal payloads give equal signatures.
func (s *Signer) Sign(payload []byte) string {
	return hex.EncodeToString(ed25519.Sign(s.priv, payload))
}

func (s *Signer) signRaw(payload []byte) []byte { return ed25519.Sign(s.priv, payload) }

// String prints the public key only.
func (s *Signer) String() string { return "identity.Signer(" + s.pubHex + ")" }

// GoString keeps %#v from dumping the private key.
func (s *Signer) GoString() string { return s.String() }

// Verify checks a lowercase-hex Ed25519 signature over payload. A malformed or
// non-verifying signature wraps ErrBadSignature, as does any signature under
// a key of small order (smallorder.go: nobody holds one, and
// ed25519.Verify takes signatures under it that anyone can make); a key of
// the wrong size wraps ErrBadKey (and is refused rather than handed to
// ed25519.Verify, which panics).
func Verify(pub ed25519.PublicKey, payload []byte, sigHex string) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: public key is %d bytes, want %d", ErrBadKey, len(pub), ed25519.PublicKeySize)
	}
	if !isLowerHex(sigHex, SignatureHexLen) {
		return fmt.Errorf("%w: signature must be %d lowercase hex chars: %s",
			ErrBadSignature, SignatureHexLen, describeHex(sigHex, SignatureHexLen))
	}
	sig, _ := hex.DecodeString(sigHex) // cannot fail: checked above
	if smallOrder(pub) || !ed25519.Verify(pub, payload, sig) {
		return fmt.Errorf("%w: does not verify under %s", ErrBadSignature, PublicKeyHex(pub))
	}
	return nil
}
