package identity

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

func benchSigner(b *testing.B, c byte) *Signer {
	s, err := NewSignerFromSeed([]byte(strings.Repeat(string([]byte{c}), ed25519.SeedSize)))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkVerify is one Ed25519 check of a hex signature (tickets, the
// handshake, presenter proofs).
func BenchmarkVerify(b *testing.B) {
	s := benchSigner(b, 0xe1)
	payload := []byte(`{"nonce":"0123456789abcdef0123456789abcdef","providerKey":"` + s.PublicKeyHex() + `","ts":1764590000}`)
	sig := s.Sign(payload)
	pub := s.PublicKey()
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(pub, payload, sig); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyChain verifies a caller's actor chain of three hops.
func BenchmarkVerifyChain(b *testing.B) {
	var tokens []string
	var prev *Hop
	for _, c := range []byte{0xa5, 0xa6, 0xa7} {
		h, err := SignHop(benchSigner(b, c), prev, nil)
		if err != nil {
			b.Fatal(err)
		}
		tokens = append(tokens, h.Token)
		prev = &h
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := VerifyChain(tokens); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignHop is funduq signing its dispatch hop.
func BenchmarkSignHop(b *testing.B) {
	s := benchSigner(b, 0xb6)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SignHop(s, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
