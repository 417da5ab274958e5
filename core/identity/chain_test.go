package identity

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
)

// craft signs arbitrary claims bytes under the exact header, bypassing
// SignHop's checks, to build hops VerifyChain must refuse.
func craft(s *Signer, claims string) string {
	return signCompact(s, jwsHeaderSeg, base64.RawURLEncoding.EncodeToString([]byte(claims)))
}

func craftHeader(s *Signer, header, claims string) string {
	return signCompact(s, base64.RawURLEncoding.EncodeToString([]byte(header)),
		base64.RawURLEncoding.EncodeToString([]byte(claims)))
}

// craftHop signs well-formed claims (actor, prevHash of prevToken, dispatch)
// with s, whatever the chain rules say.
func craftHop(s *Signer, actor, prevToken string, d *DispatchTarget) string {
	h := Hop{ActorKey: actor, DispatchedTo: d}
	if prevToken != "" {
		h.PrevHash = SHA256Hex([]byte(prevToken))
	}
	return craft(s, string(appendClaims(nil, h)))
}

func mustHop(t *testing.T, s *Signer, prev *Hop, d *DispatchTarget) Hop {
	t.Helper()
	h, err := SignHop(s, prev, d)
	if err != nil {
		t.Fatalf("SignHop: %v", err)
	}
	return h
}

func TestVerifyChainAccepts(t *testing.T) {
	a5, b6, e1 := signerOf(t, "a5"), signerOf(t, "b6"), signerOf(t, "e1")
	h0 := mustHop(t, a5, nil, nil)
	toE1 := &DispatchTarget{ProviderKey: e1.PublicKeyHex(), Name: "translator"}
	d1 := mustHop(t, b6, &h0, toE1)
	p2 := mustHop(t, e1, &d1, nil)
	rd := mustHop(t, b6, &d1, &DispatchTarget{ProviderKey: e1.PublicKeyHex(), Name: "other"})
	p3 := mustHop(t, e1, &rd, nil)
	uni := mustHop(t, b6, &h0, &DispatchTarget{ProviderKey: e1.PublicKeyHex(), Name: "翻訳者 😀"})

	for _, tc := range []struct {
		name   string
		tokens []string
		keys   []string
	}{
		{"vector chain", []string{vectorHop0, vectorHop1}, []string{testKeyA5, testKeyB6}},
		{"vector delivered-run chain ends at a dispatch", []string{vectorHop0, vectorDispatch}, []string{testKeyA5, testKeyB6}},
		{"single hop", []string{h0.Token}, []string{testKeyA5}},
		{"dispatch then the named provider", []string{h0.Token, d1.Token, p2.Token}, []string{testKeyA5, testKeyB6, e1.PublicKeyHex()}},
		{"dispatcher re-dispatches", []string{h0.Token, d1.Token, rd.Token, p3.Token}, []string{testKeyA5, testKeyB6, testKeyB6, e1.PublicKeyHex()}},
		{"non-ASCII agent name", []string{h0.Token, uni.Token}, []string{testKeyA5, testKeyB6}},
		// Lenient readings of claims that only differ from ours in form.
		{"missing prevHash reads as null", []string{craft(a5, `{"actorPublicKey":"`+testKeyA5+`"}`)}, []string{testKeyA5}},
		{"null dispatchedTo reads as absent", []string{craft(a5, `{"actorPublicKey":"`+testKeyA5+`","prevHash":null,"dispatchedTo":null}`)}, []string{testKeyA5}},
		{"other key order", []string{craft(a5, `{"prevHash":null,"actorPublicKey":"`+testKeyA5+`"}`)}, []string{testKeyA5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := VerifyChain(tc.tokens)
			if err != nil {
				t.Fatalf("VerifyChain: %v", err)
			}
			if !slices.Equal(c.ActorKeys(), tc.keys) || !slices.Equal(c.Tokens(), tc.tokens) {
				t.Fatalf("keys = %v, tokens = %v", c.ActorKeys(), c.Tokens())
			}
			want := ChainSummary{HeadKey: tc.keys[0], PresenterKey: tc.keys[len(tc.keys)-1], Hops: len(tc.keys)}
			if c.Summary() != want || c.Head() != want.HeadKey || c.Presenter() != want.PresenterKey || c.Len() != want.Hops {
				t.Fatalf("summary = %+v, want %+v", c.Summary(), want)
			}
		})
	}

	c, err := VerifyChain([]string{h0.Token, uni.Token})
	if err != nil {
		t.Fatal(err)
	}
	if d := c.Hops[1].DispatchedTo; d == nil || d.Name != "翻訳者 😀" {
		t.Fatalf("dispatchedTo = %+v", d)
	}
	claims, _ := base64.RawURLEncoding.DecodeString(strings.Split(uni.Token, ".")[1])
	if !strings.Contains(string(claims), `"name":"\u7ffb\u8a33\u8005 \ud83d\ude00"`) {
		t.Fatalf("claims not ensure_ascii rendered: %s", claims)
	}
}

func TestVerifyChainRefuses(t *testing.T) {
	a5, b6, e1, c3 := signerOf(t, "a5"), signerOf(t, "b6"), signerOf(t, "e1"), signerOf(t, "c3")
	h0 := mustHop(t, a5, nil, nil)
	h1 := mustHop(t, b6, &h0, nil)
	d1 := mustHop(t, b6, &h0, &DispatchTarget{ProviderKey: e1.PublicKeyHex(), Name: "translator"})
	other0 := mustHop(t, c3, nil, nil)
	other1 := mustHop(t, b6, &other0, nil)

	claims0 := string(appendClaims(nil, Hop{ActorKey: testKeyA5}))
	header, claimsSeg, sigSeg := splitToken(h0.Token)
	sig, _ := base64.RawURLEncoding.DecodeString(sigSeg)
	sig[0] ^= 0x01
	flippedSig := base64.RawURLEncoding.EncodeToString(sig)
	// The last char of an 86-char segment carries 2 data bits and 4 zero bits;
	// setting one of those yields the same bytes in a non-canonical spelling.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, sigSeg[len(sigSeg)-1])
	nonCanonicalSig := sigSeg[:len(sigSeg)-1] + string(alphabet[last|1])
	paddedSeg := base64.URLEncoding.EncodeToString([]byte(claims0 + " "))
	if !strings.HasSuffix(paddedSeg, "=") {
		paddedSeg = base64.URLEncoding.EncodeToString([]byte(claims0 + "  "))
	}
	padded := signCompact(a5, jwsHeaderSeg, paddedSeg)
	dispatchClaims := func(inner string) string {
		return `{"actorPublicKey":"` + testKeyB6 + `","prevHash":"` + SHA256Hex([]byte(h0.Token)) + `","dispatchedTo":` + inner + `}`
	}
	toE1 := func(name string) string {
		return `{"providerKey":"` + e1.PublicKeyHex() + `","name":"` + name + `"}`
	}

	for _, tc := range []struct {
		name    string
		tokens  []string
		hop     int
		reason  string
		wantErr error // extra cause beyond ErrInvalidChain, if any
	}{
		{"empty chain", nil, -1, "empty", nil},
		{"empty slice", []string{}, -1, "empty", nil},
		{"empty token", []string{""}, 0, "compact JWS", nil},
		{"two segments", []string{header + "." + claimsSeg}, 0, "compact JWS", nil},
		{"four segments", []string{h0.Token + ".x"}, 0, "compact JWS", nil},
		{"header keys reordered", []string{craftHeader(a5, `{"typ":"JWT","alg":"EdDSA"}`, claims0)}, 0, "header", nil},
		{"header alg none", []string{craftHeader(a5, `{"alg":"none","typ":"JWT"}`, claims0)}, 0, "header", nil},
		{"header with whitespace", []string{craftHeader(a5, `{"alg": "EdDSA","typ":"JWT"}`, claims0)}, 0, "header", nil},
		{"claims not base64url", []string{header + ".***." + sigSeg}, 0, "claims segment", nil},
		{"claims padded base64", []string{padded}, 0, "claims segment", nil},
		{"claims not JSON", []string{craft(a5, "not json")}, 0, "bad claims", nil},
		{"claims an array", []string{craft(a5, `["`+testKeyA5+`"]`)}, 0, "bad claims", nil},
		{"claims null", []string{craft(a5, `null`)}, 0, "bad claims", nil},
		{"claims with trailing garbage", []string{craft(a5, claims0+"x")}, 0, "bad claims", nil},
		{"unknown claim iat", []string{craft(a5, `{"actorPublicKey":"`+testKeyA5+`","prevHash":null,"iat":1}`)}, 0, `unknown key "iat"`, nil},
		{"case-variant claim name", []string{craft(a5, `{"ActorPublicKey":"`+testKeyA5+`","prevHash":null}`)}, 0, "unknown key", nil},
		{"missing actorPublicKey", []string{craft(a5, `{"prevHash":null}`)}, 0, "lack actorPublicKey", nil},
		{"actorPublicKey null", []string{craft(a5, `{"actorPublicKey":null,"prevHash":null}`)}, 0, "not a string", nil},
		{"actorPublicKey a number", []string{craft(a5, `{"actorPublicKey":1,"prevHash":null}`)}, 0, "not a string", nil},
		{"actorPublicKey uppercase", []string{craft(a5, `{"actorPublicKey":"`+strings.ToUpper(testKeyA5)+`","prevHash":null}`)}, 0, "bad actorPublicKey", ErrBadKey},
		{"signature not base64url", []string{header + "." + claimsSeg + ".***"}, 0, "signature segment", nil},
		{"signature non-canonical base64url", []string{header + "." + claimsSeg + "." + nonCanonicalSig}, 0, "signature segment", nil},
		{"signature too short", []string{header + "." + claimsSeg + "." + sigSeg[:80]}, 0, "signature is 60 bytes", ErrBadSignature},
		{"signature bit flipped", []string{header + "." + claimsSeg + "." + flippedSig}, 0, "does not verify", ErrBadSignature},
		{"claims edited after signing", []string{header + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(claims0, testKeyA5, testKeyB6, 1))) + "." + sigSeg}, 0, "does not verify", ErrBadSignature},
		{"signed by another key", []string{craft(b6, claims0)}, 0, "does not verify", ErrBadSignature},
		{"first hop with prevHash", []string{craftHop(a5, testKeyA5, h0.Token, nil)}, 0, "null prevHash", nil},
		{"prevHash empty string", []string{craft(a5, `{"actorPublicKey":"`+testKeyA5+`","prevHash":""}`)}, 0, "prevHash", nil},
		{"prevHash a number", []string{craft(a5, `{"actorPublicKey":"`+testKeyA5+`","prevHash":5}`)}, 0, "prevHash", nil},
		{"head dropped", []string{h1.Token}, 0, "null prevHash", nil},
		{"hops reordered", []string{h1.Token, h0.Token}, 0, "null prevHash", nil},
		{"hop duplicated", []string{h0.Token, h0.Token}, 1, "prevHash is null", nil},
		{"later hop with null prevHash", []string{h0.Token, craftHop(b6, testKeyB6, "", nil)}, 1, "prevHash is null", nil},
		{"later hop with wrong prevHash", []string{h0.Token, craftHop(b6, testKeyB6, "other", nil)}, 1, "does not match", nil},
		{"later hop with uppercase prevHash", []string{h0.Token, craft(b6, `{"actorPublicKey":"`+testKeyB6+`","prevHash":"`+strings.ToUpper(SHA256Hex([]byte(h0.Token)))+`"}`)}, 1, "does not match", nil},
		{"hop spliced from another chain", []string{h0.Token, other1.Token}, 1, "does not match", nil},
		{"after dispatch a third party signs", []string{h0.Token, d1.Token, craftHop(c3, c3.PublicKeyHex(), d1.Token, nil)}, 2, "follows a dispatch", nil},
		{"after dispatch a third party dispatches", []string{h0.Token, d1.Token, craftHop(c3, c3.PublicKeyHex(), d1.Token, &DispatchTarget{ProviderKey: e1.PublicKeyHex(), Name: "x"})}, 2, "follows a dispatch", nil},
		{"after dispatch the dispatcher signs a plain hop", []string{h0.Token, d1.Token, craftHop(b6, testKeyB6, d1.Token, nil)}, 2, "follows a dispatch", nil},
		{"after dispatch the previous head signs", []string{h0.Token, d1.Token, craftHop(a5, testKeyA5, d1.Token, nil)}, 2, "follows a dispatch", nil},
		{"dispatchedTo not an object", []string{h0.Token, craft(b6, dispatchClaims(`"x"`))}, 1, "bad dispatchedTo", nil},
		{"dispatchedTo unknown key", []string{h0.Token, craft(b6, dispatchClaims(`{"providerKey":"`+e1.PublicKeyHex()+`","name":"t","model":"m"}`))}, 1, "unknown key", nil},
		{"dispatchedTo uppercase providerKey", []string{h0.Token, craft(b6, dispatchClaims(`{"providerKey":"`+strings.ToUpper(e1.PublicKeyHex())+`","name":"t"}`))}, 1, "providerKey", ErrBadKey},
		{"dispatchedTo missing providerKey", []string{h0.Token, craft(b6, dispatchClaims(`{"name":"t"}`))}, 1, "providerKey", nil},
		{"dispatchedTo empty name", []string{h0.Token, craft(b6, dispatchClaims(toE1("")))}, 1, "name", nil},
		{"dispatchedTo missing name", []string{h0.Token, craft(b6, dispatchClaims(`{"providerKey":"`+e1.PublicKeyHex()+`"}`))}, 1, "name", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyChain(tc.tokens)
			if !errors.Is(err, ErrInvalidChain) {
				t.Fatalf("err = %v, want ErrInvalidChain", err)
			}
			var ce *ChainError
			if !errors.As(err, &ce) || ce.Hop != tc.hop {
				t.Fatalf("err = %v, want a ChainError at hop %d", err, tc.hop)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("err = %q, want it to mention %q", err, tc.reason)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want it to wrap %v", err, tc.wantErr)
			}
		})
	}
}

func splitToken(tok string) (header, claims, sig string) {
	p := strings.Split(tok, ".")
	return p[0], p[1], p[2]
}

func TestSignHopReproducesVectors(t *testing.T) {
	h0 := mustHop(t, signerOf(t, "a5"), nil, nil)
	h1 := mustHop(t, signerOf(t, "b6"), &h0, nil)
	if h0.Token != vectorHop0 || h1.Token != vectorHop1 {
		t.Fatalf("tokens differ from the vectors:\n%s\n%s", h0.Token, h1.Token)
	}
	if h0.PrevHash != "" || h1.PrevHash != SHA256Hex([]byte(vectorHop0)) {
		t.Fatalf("prevHash: %q, %q", h0.PrevHash, h1.PrevHash)
	}
	c, err := AppendDispatchHop(Chain{Hops: []Hop{h0}}, signerOf(t, "b6"), signerOf(t, "e1").PublicKeyHex(), "translator")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Tokens(), []string{vectorHop0, vectorDispatch}) {
		t.Fatalf("dispatch hop = %s", c.Hops[1].Token)
	}
}

func TestSignHopRefuses(t *testing.T) {
	a5, b6, e1, c3 := signerOf(t, "a5"), signerOf(t, "b6"), signerOf(t, "e1"), signerOf(t, "c3")
	h0 := mustHop(t, a5, nil, nil)
	d1 := mustHop(t, b6, &h0, &DispatchTarget{ProviderKey: e1.PublicKeyHex(), Name: "translator"})
	for _, tc := range []struct {
		name string
		s    *Signer
		prev *Hop
		d    *DispatchTarget
		want error
	}{
		{"nil signer", nil, nil, nil, nil},
		{"previous hop without token", a5, &Hop{ActorKey: testKeyA5}, nil, ErrInvalidChain},
		{"third party after dispatch", c3, &d1, nil, ErrInvalidChain},
		{"dispatcher plain hop after dispatch", b6, &d1, nil, ErrInvalidChain},
		{"bad dispatch key", b6, &h0, &DispatchTarget{ProviderKey: "nope", Name: "t"}, ErrBadKey},
		{"empty dispatch name", b6, &h0, &DispatchTarget{ProviderKey: e1.PublicKeyHex()}, ErrInvalidChain},
		{"non-UTF-8 dispatch name", b6, &h0, &DispatchTarget{ProviderKey: e1.PublicKeyHex(), Name: "\xff"}, ErrInvalidChain},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SignHop(tc.s, tc.prev, tc.d)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// The two hops a dispatch allows are signed.
	mustHop(t, e1, &d1, nil)
	mustHop(t, b6, &d1, &DispatchTarget{ProviderKey: c3.PublicKeyHex(), Name: "x"})
}

func TestAppendDispatchHop(t *testing.T) {
	a5, b6, e1 := signerOf(t, "a5"), signerOf(t, "b6"), signerOf(t, "e1")
	if _, err := AppendDispatchHop(Chain{}, b6, e1.PublicKeyHex(), "t"); !errors.Is(err, ErrInvalidChain) {
		t.Fatalf("empty chain: err = %v", err)
	}
	if _, err := AppendDispatchHop(Chain{Hops: []Hop{mustHop(t, a5, nil, nil)}}, b6, "bad", "t"); !errors.Is(err, ErrBadKey) {
		t.Fatalf("bad provider key: err = %v", err)
	}
	base, err := VerifyChain([]string{vectorHop0, vectorHop1})
	if err != nil {
		t.Fatal(err)
	}
	// Extending a prefix must not overwrite the hop that follows it in the
	// backing array.
	prefix := Chain{Hops: base.Hops[:1]}
	ext, err := AppendDispatchHop(prefix, b6, e1.PublicKeyHex(), "translator")
	if err != nil {
		t.Fatal(err)
	}
	if base.Hops[1].Token != vectorHop1 || prefix.Len() != 1 || ext.Len() != 2 {
		t.Fatal("AppendDispatchHop modified its input")
	}
	full, err := AppendDispatchHop(base, b6, e1.PublicKeyHex(), "translator")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyChain(full.Tokens()); err != nil {
		t.Fatalf("extended chain does not verify: %v", err)
	}
	if full.Presenter() != testKeyB6 || full.Head() != testKeyA5 {
		t.Fatalf("summary = %+v", full.Summary())
	}
}

func TestEmptyChainAccessors(t *testing.T) {
	var c Chain
	if c.Head() != "" || c.Presenter() != "" || c.Len() != 0 || len(c.Tokens()) != 0 || len(c.ActorKeys()) != 0 {
		t.Fatal("empty chain accessors")
	}
	if c.Summary() != (ChainSummary{}) {
		t.Fatalf("summary = %+v", c.Summary())
	}
}
