package authorizer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.uber.org/goleak"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.Main(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

var b64 = base64.RawURLEncoding

// issuer is an identity provider: a key set served over HTTP and tokens
// signed with its keys.
type issuer struct {
	ed      ed25519.PrivateKey
	rsa     *rsa.PrivateKey
	ec      *ecdsa.PrivateKey
	srv     *httptest.Server
	fetches atomic.Int32
	extra   atomic.Pointer[string] // a further JWK served after a rotation
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	is := &issuer{}
	_, is.ed, _ = ed25519.GenerateKey(rand.Reader)
	is.rsa, _ = rsa.GenerateKey(rand.Reader, 2048)
	is.ec, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.fetches.Add(1)
		pt, _ := is.ec.PublicKey.Bytes() // 0x04 || X || Y
		ecx, ecy := pt[1:33], pt[33:]
		keys := []string{
			`{"kty":"OKP","crv":"Ed25519","kid":"ed","x":"` + b64.EncodeToString(is.ed.Public().(ed25519.PublicKey)) + `"}`,
			`{"kty":"RSA","kid":"rsa","alg":"RS256","use":"sig","n":"` + b64.EncodeToString(is.rsa.N.Bytes()) +
				`","e":"` + b64.EncodeToString(big.NewInt(int64(is.rsa.E)).Bytes()) + `"}`,
			`{"kty":"EC","crv":"P-256","kid":"ec","x":"` + b64.EncodeToString(ecx) + `","y":"` + b64.EncodeToString(ecy) + `"}`,
			`{"kty":"oct","kid":"hs","k":"c2VjcmV0"}`,
		}
		if e := is.extra.Load(); e != nil {
			keys = append(keys, *e)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"keys":[` + strings.Join(keys, ",") + `]}`))
	}))
	t.Cleanup(is.srv.Close)
	return is
}

func (is *issuer) token(t *testing.T, alg, kid string, claims map[string]any) string {
	t.Helper()
	h, _ := json.Marshal(map[string]any{"alg": alg, "kid": kid, "typ": "JWT"})
	c, _ := json.Marshal(claims)
	input := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	sum := sha256.Sum256([]byte(input))
	var sig []byte
	switch alg {
	case "EdDSA":
		sig = ed25519.Sign(is.ed, []byte(input))
	case "RS256":
		sig, _ = rsa.SignPKCS1v15(rand.Reader, is.rsa, crypto.SHA256, sum[:])
	case "ES256":
		r, s, _ := ecdsa.Sign(rand.Reader, is.ec, sum[:])
		sig = append(r.FillBytes(make([]byte, 32)), s.FillBytes(make([]byte, 32))...)
	case "HS256":
		m := hmac.New(sha256.New, []byte("secret"))
		m.Write([]byte(input))
		sig = m.Sum(nil)
	case "none":
	}
	return input + "." + b64.EncodeToString(sig)
}

var now = time.Unix(1_800_000_000, 0)

const callerKey = "a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5"

func claims(over map[string]any) map[string]any {
	c := map[string]any{"iss": "https://idp.example", "aud": "funduq", "exp": now.Add(time.Hour).Unix(),
		"iat": now.Unix(), "funduq_key": callerKey}
	for k, v := range over {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	return c
}

func newAuth(t *testing.T, is *issuer, anonymous bool) *Authorizer {
	t.Helper()
	cfg := Config{KeyClaim: "funduq_key", AllowAnonymous: anonymous, Leeway: time.Minute}
	if is != nil {
		cfg.JWKSURL, cfg.Issuer, cfg.Audience = is.srv.URL, "https://idp.example", "funduq"
	}
	a, err := New(cfg, Options{Client: is.client(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (is *issuer) client() *http.Client {
	if is == nil {
		return nil
	}
	return is.srv.Client()
}

func request(method string, h map[string]string) events.APIGatewayCustomAuthorizerRequestTypeRequest {
	return events.APIGatewayCustomAuthorizerRequestTypeRequest{Type: "REQUEST", HTTPMethod: method, Path: "/agui/p/n",
		MethodArn: "arn:aws:execute-api:eu-west-1:123456789012:abc/v1/" + method + "/agui/p/n", Headers: h}
}

func signer(t *testing.T) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(strings.Repeat("11", 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A presenter's signature over the declared body digest authenticates its
// key; the Allow carries the key and the digest it is bound to.
func TestPresenter(t *testing.T) {
	a := newAuth(t, nil, true)
	s := signer(t)
	body := []byte(`{"threadId":"t","runId":"r"}`)
	hdr := map[string]string{"funduq-presenter": identity.MakePresenterHeader(s, now.Unix(), body),
		"funduq-body-sha256": identity.SHA256Hex(body)}
	out, err := a.Authorize(context.Background(), request("POST", hdr))
	if err != nil {
		t.Fatal(err)
	}
	st := out.PolicyDocument.Statement
	if out.PrincipalID != s.PublicKeyHex() || out.Context[ContextKey] != s.PublicKeyHex() ||
		out.Context[ContextBody] != identity.SHA256Hex(body) || out.Context[ContextVia] != "presenter" ||
		len(st) != 1 || st[0].Effect != "Allow" || st[0].Resource[0] != request("POST", nil).MethodArn {
		t.Fatalf("%+v", out)
	}
	// A GET signs the empty body; no digest header is needed.
	out, err = a.Authorize(context.Background(), request("GET", map[string]string{
		"Funduq-Presenter": identity.MakePresenterHeader(s, now.Unix(), nil)}))
	if err != nil || out.Context[ContextKey] != s.PublicKeyHex() {
		t.Fatalf("GET: %+v %v", out, err)
	}
	// A POST proof without the digest goes on unverified and without a key
	// (the door checks it against the body); with anonymous callers denied
	// it is refused.
	noDigest := map[string]string{"Funduq-Presenter": identity.MakePresenterHeader(s, now.Unix(), body)}
	out, err = a.Authorize(context.Background(), request("POST", noDigest))
	if err != nil || out.Context[ContextKey] != nil || out.Context[ContextVia] != "anonymous" {
		t.Fatalf("POST without a digest: %+v %v", out, err)
	}
	if _, err := newAuth(t, nil, false).Authorize(context.Background(), request("POST", noDigest)); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("POST without a digest, anonymous denied: %v", err)
	}
	for name, h := range map[string]map[string]string{
		"another body's digest": {"Funduq-Presenter": identity.MakePresenterHeader(s, now.Unix(), body),
			"Funduq-Body-Sha256": identity.SHA256Hex([]byte("{}"))},
		"digest in upper case": {"Funduq-Presenter": identity.MakePresenterHeader(s, now.Unix(), body),
			"Funduq-Body-Sha256": strings.ToUpper(identity.SHA256Hex(body))},
		"stale": {"Funduq-Presenter": identity.MakePresenterHeader(s, now.Unix()-61, body),
			"Funduq-Body-Sha256": identity.SHA256Hex(body)},
		"not a proof": {"Funduq-Presenter": "x", "Funduq-Body-Sha256": identity.SHA256Hex(body)},
	} {
		if out, err := a.Authorize(context.Background(), request("POST", h)); !errors.Is(err, ErrUnauthorized) || err.Error() != "Unauthorized" {
			t.Errorf("%s: %+v %v", name, out, err)
		}
	}
}

// No credential: through without a key when anonymous callers are allowed
// (the doors serve an anonymous caller), 401 when not.
func TestAnonymous(t *testing.T) {
	out, err := newAuth(t, nil, true).Authorize(context.Background(), request("POST", map[string]string{"Accept": "text/event-stream"}))
	if err != nil || out.PrincipalID != "anonymous" || out.Context[ContextKey] != nil || out.Context[ContextVia] != "anonymous" {
		t.Fatalf("%+v %v", out, err)
	}
	if _, err := newAuth(t, nil, false).Authorize(context.Background(), request("POST", nil)); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("closed: %v", err)
	}
	// A bearer token where none is configured is refused, not ignored.
	if _, err := newAuth(t, nil, true).Authorize(context.Background(), request("GET",
		map[string]string{"Authorization": "Bearer x.y.z"})); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("unconfigured bearer: %v", err)
	}
}

// Bearer JWTs from the operator's identity provider, verified against its
// JWKS (served here by an httptest server), name the caller's key.
func TestJWT(t *testing.T) {
	is := newIssuer(t)
	a := newAuth(t, is, false)
	for _, alg := range []struct{ alg, kid string }{{"EdDSA", "ed"}, {"RS256", "rsa"}, {"ES256", "ec"}} {
		out, err := a.Authorize(context.Background(), request("GET", map[string]string{
			"authorization": "Bearer " + is.token(t, alg.alg, alg.kid, claims(nil))}))
		if err != nil || out.Context[ContextKey] != callerKey || out.Context[ContextVia] != "jwt" || out.Context[ContextBody] != nil {
			t.Fatalf("%s: %+v %v", alg.alg, out, err)
		}
	}
	if n := is.fetches.Load(); n != 1 {
		t.Fatalf("key set fetched %d times, want once (cached)", n)
	}
	for name, tok := range map[string]string{
		"expired":                   is.token(t, "EdDSA", "ed", claims(map[string]any{"exp": now.Add(-2 * time.Minute).Unix()})),
		"no exp":                    is.token(t, "EdDSA", "ed", claims(map[string]any{"exp": nil})),
		"not yet":                   is.token(t, "EdDSA", "ed", claims(map[string]any{"nbf": now.Add(5 * time.Minute).Unix()})),
		"other issuer":              is.token(t, "EdDSA", "ed", claims(map[string]any{"iss": "https://evil.example"})),
		"other audience":            is.token(t, "EdDSA", "ed", claims(map[string]any{"aud": []string{"x", "y"}})),
		"no key claim":              is.token(t, "EdDSA", "ed", claims(map[string]any{"funduq_key": nil})),
		"key claim not hex":         is.token(t, "EdDSA", "ed", claims(map[string]any{"funduq_key": "ABC"})),
		"alg none":                  is.token(t, "none", "ed", claims(nil)),
		"HS256 with a JWKS oct key": is.token(t, "HS256", "hs", claims(nil)),
		"RS256 header, Ed25519 key": strings.Replace(is.token(t, "EdDSA", "ed", claims(nil)), b64.EncodeToString([]byte(`{"alg":"EdDSA"`)), b64.EncodeToString([]byte(`{"alg":"RS256"`)), 1),
		"tampered claims":           tamper(is.token(t, "EdDSA", "ed", claims(nil))),
		"not a JWT":                 "abc",
	} {
		if _, err := a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " + tok})); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// An audience list containing ours is fine.
	if _, err := a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " +
		is.token(t, "ES256", "ec", claims(map[string]any{"aud": []string{"other", "funduq"}}))})); err != nil {
		t.Fatal(err)
	}
	// A presenter and a token naming different keys are refused; the same key is fine.
	s := signer(t)
	hdr := map[string]string{"Authorization": "Bearer " + is.token(t, "EdDSA", "ed", claims(nil)),
		"Funduq-Presenter": identity.MakePresenterHeader(s, now.Unix(), nil)}
	if _, err := a.Authorize(context.Background(), request("GET", hdr)); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("disagreeing credentials: %v", err)
	}
	hdr["Authorization"] = "Bearer " + is.token(t, "EdDSA", "ed", claims(map[string]any{"funduq_key": s.PublicKeyHex()}))
	if out, err := a.Authorize(context.Background(), request("GET", hdr)); err != nil || out.Context[ContextKey] != s.PublicKeyHex() {
		t.Fatalf("agreeing credentials: %+v %v", out, err)
	}
}

func tamper(tok string) string {
	p := strings.Split(tok, ".")
	c, _ := b64.DecodeString(p[1])
	c = []byte(strings.Replace(string(c), callerKey, strings.Repeat("b6", 32), 1))
	p[1] = b64.EncodeToString(c)
	return strings.Join(p, ".")
}

// A key the cached set lacks (the issuer rotated) is fetched again, at
// most once a minute; an unreachable key set is an error of its own (API
// Gateway answers 500), not a refusal of the caller.
func TestJWKSRotationAndOutage(t *testing.T) {
	is := newIssuer(t)
	clock := now
	a := newAuth(t, is, false)
	a.now = func() time.Time { return clock }
	a.jwt.Now, a.jwt.Keys.Now = a.now, a.now
	get := func(tok string) error {
		_, err := a.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " + tok}))
		return err
	}
	if err := get(is.token(t, "EdDSA", "ed", claims(nil))); err != nil {
		t.Fatal(err)
	}
	_, ed2, _ := ed25519.GenerateKey(rand.Reader)
	old := is.ed
	is.ed = ed2
	tok2 := is.token(t, "EdDSA", "ed2", claims(nil))
	is.ed = old
	jwk2 := `{"kty":"OKP","crv":"Ed25519","kid":"ed2","x":"` + b64.EncodeToString(ed2.Public().(ed25519.PublicKey)) + `"}`
	is.extra.Store(&jwk2)
	// Within a minute of the last fetch the unknown kid is not fetched again.
	if err := get(tok2); !errors.Is(err, ErrUnauthorized) || is.fetches.Load() != 1 {
		t.Fatalf("within the refresh floor: %v, %d fetches", err, is.fetches.Load())
	}
	clock = clock.Add(61 * time.Second)
	if err := get(tok2); err != nil || is.fetches.Load() != 2 {
		t.Fatalf("after rotation: %v, %d fetches", err, is.fetches.Load())
	}
	is.srv.Close()
	b := newAuth(t, &issuer{srv: is.srv}, false)
	if err := func() error {
		_, err := b.Authorize(context.Background(), request("GET", map[string]string{"Authorization": "Bearer " + tok2}))
		return err
	}(); err == nil || errors.Is(err, ErrUnauthorized) {
		t.Fatalf("outage: %v", err)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{{JWKSURL: "https://idp/jwks"}, {JWKSURL: "ftp://x", Issuer: "i", Audience: "a", KeyClaim: "k"},
		{Issuer: "i"}, {JWKSURL: "https://idp/jwks", Issuer: "i", Audience: "a"}} {
		if c.Check() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if err := (Config{JWKSURL: "https://idp/jwks", Issuer: "i", Audience: "a", KeyClaim: "k"}).Check(); err != nil {
		t.Fatal(err)
	}
}

func FuzzParseJWT(f *testing.F) {
	f.Add("eyJhbGciOiJFZERTQSJ9.eyJleHAiOjF9.c2ln")
	f.Add("a.b.c")
	f.Add("..")
	f.Fuzz(func(t *testing.T, tok string) {
		p, err := parseJWT(tok)
		if err != nil {
			if !errors.Is(err, ErrBadToken) {
				t.Fatalf("unwrapped error %v", err)
			}
			return
		}
		if p.claims == nil || strings.Count(tok, ".") != 2 || !strings.HasPrefix(tok, string(p.signingInput)) {
			t.Fatalf("accepted %q as %+v", tok, p)
		}
	})
}

func FuzzParseJWKS(f *testing.F) {
	f.Add([]byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"` + b64.EncodeToString(make([]byte, 32)) + `"}]}`))
	f.Add([]byte(`{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseJWKS(b)
		if err != nil {
			return
		}
		for _, ks := range keys {
			for _, k := range ks {
				if k.verify(k.alg, []byte("x"), make([]byte, 64)) && k.alg != "EdDSA" {
					t.Fatalf("a zero signature verified under %s", k.alg)
				}
			}
		}
	})
}
