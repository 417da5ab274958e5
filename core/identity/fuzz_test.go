package identity

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Fuzzers assert "never panics" plus the invariants that must hold whenever
// input is accepted. Seeds are the published vectors and their near misses.

func FuzzVerifyChain(f *testing.F) {
	// One fuzz string holds the whole chain, hops separated by ',' (which
	// never occurs in a compact JWS).
	for _, seed := range []string{
		vectorHop0,
		vectorHop0 + "," + vectorHop1,
		vectorHop0 + "," + vectorDispatch,
		vectorHop1 + "," + vectorHop0,
		vectorHop0 + "," + vectorHop1 + "," + vectorDispatch,
		vectorHop0[:len(vectorHop0)-1],
		"",
		"a.b.c",
		",",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tokens := strings.Split(s, ",")
		c, err := VerifyChain(tokens)
		if err != nil {
			if !errors.Is(err, ErrInvalidChain) {
				t.Fatalf("refusal does not wrap ErrInvalidChain: %v", err)
			}
			return
		}
		if !slices.Equal(c.Tokens(), tokens) || c.Len() != len(tokens) {
			t.Fatal("accepted chain does not hold its tokens")
		}
		for _, k := range c.ActorKeys() {
			if !IsPublicKeyHex(k) {
				t.Fatalf("accepted actor key %q", k)
			}
		}
	})
}

func FuzzVerifyKyokToken(f *testing.F) {
	secret := []byte(kyokExampleSecret)
	now := time.Unix(1755500000, 0)
	body, mac, _ := strings.Cut(kyokExampleToken, ".")
	for _, seed := range []string{
		kyokExampleToken,
		body,
		body + ".",
		"." + mac,
		body + "." + strings.ToUpper(mac),
		MintKyokToken(secret, KyokClaims{RunID: "r", ProviderKey: testKeyA5, AgentName: "a", Exp: 1}),
		MintKyokToken(secret, KyokClaims{RunID: "r", ProviderKey: testKeyA5, Exp: 9999999999}),
	} {
		f.Add(seed, "run-1", "translator")
	}
	f.Add("", "翻訳 😀", "\x00\"\\")
	f.Fuzz(func(t *testing.T, token, runID, agent string) {
		c, err := VerifyKyokToken(secret, token, now)
		if err != nil {
			if !errors.Is(err, ErrBadToken) && !errors.Is(err, ErrTokenExpired) {
				t.Fatalf("unexpected error type: %v", err)
			}
		} else if c.RunID == "" || c.ProviderKey == "" || c.AgentName == "" || c.Exp < now.Unix() {
			t.Fatalf("accepted claims %+v", c)
		}
		// Minting any valid-UTF-8 claims must verify back to the same claims,
		// i.e. the Python-style JSON rendering parses back losslessly.
		if runID == "" || agent == "" || !utf8.ValidString(runID) || !utf8.ValidString(agent) {
			return
		}
		want := KyokClaims{RunID: runID, ProviderKey: testKeyA5, AgentName: agent, Exp: 9999999999}
		got, err := VerifyKyokToken(secret, MintKyokToken(secret, want), now)
		if err != nil || got != want {
			t.Fatalf("round trip of %+v = %+v, %v", want, got, err)
		}
	})
}

func FuzzParsePresenterHeader(f *testing.F) {
	s := signerOf(f, "a5")
	ts := int64(1755500000)
	body := []byte(`{"x":1}`)
	good := MakePresenterHeader(s, ts, body)
	f.Add(good, body)
	f.Add(good, []byte(`{"x":2}`))
	f.Add(MakePresenterHeader(s, ts-61, body), body)
	f.Add(strings.Replace(good, "1755500000", "1.7555e9", 1), body)
	f.Add(`{"publicKey":null,"timestamp":null,"signature":null}`, []byte(nil))
	f.Add("", []byte(nil))
	now := time.Unix(ts, 0)
	f.Fuzz(func(t *testing.T, value string, body []byte) {
		key, err := ParsePresenterHeader(value, body, now)
		if err != nil {
			if !errors.Is(err, ErrBadPresenter) || key != "" {
				t.Fatalf("refusal %q, %v", key, err)
			}
			return
		}
		if !IsPublicKeyHex(key) {
			t.Fatalf("accepted key %q", key)
		}
	})
}

func FuzzParsePublicKey(f *testing.F) {
	for _, seed := range []string{testKeyA5, testKeyB6, strings.ToUpper(testKeyA5), testKeyA5[:63], "", "zz"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		pub, err := ParsePublicKey(s)
		if err != nil {
			if !errors.Is(err, ErrBadKey) || IsPublicKeyHex(s) {
				t.Fatalf("refused %q: %v", s, err)
			}
			return
		}
		if PublicKeyHex(pub) != s || !IsPublicKeyHex(s) || !IsFingerprint(Fingerprint(pub)) {
			t.Fatalf("accepted %q as %x", s, pub)
		}
	})
}
