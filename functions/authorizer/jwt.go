package authorizer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ErrBadToken wraps every refusal of a bearer token.
var ErrBadToken = errors.New("authorizer: bad token")

// MaxTokenBytes bounds a bearer token before it is parsed.
const MaxTokenBytes = 8 << 10

// maxJWKSBytes bounds a key set document.
const maxJWKSBytes = 1 << 20

// Token is a verified JWT's header and claims.
type Token struct {
	Alg, Kid string
	Claims   map[string]json.RawMessage
}

// parsedJWT is a compact JWS split and decoded, not yet verified.
type parsedJWT struct {
	header struct {
		Alg  string `json:"alg"`
		Kid  string `json:"kid"`
		Typ  string `json:"typ"`
		Crit []any  `json:"crit"`
	}
	claims       map[string]json.RawMessage
	signingInput []byte
	signature    []byte
}

// parseJWT splits and decodes a compact JWS (header.payload.signature,
// base64url without padding). It verifies nothing.
func parseJWT(tok string) (*parsedJWT, error) {
	bad := func(format string, args ...any) (*parsedJWT, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadToken, fmt.Sprintf(format, args...))
	}
	if len(tok) > MaxTokenBytes {
		return bad("longer than %d bytes", MaxTokenBytes)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return bad("not a compact JWS (header.payload.signature)")
	}
	var p parsedJWT
	h, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return bad("header: %v", err)
	}
	if err := json.Unmarshal(h, &p.header); err != nil {
		return bad("header: %v", err)
	}
	if len(p.header.Crit) > 0 {
		return bad("critical header extensions are not supported")
	}
	c, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return bad("claims: %v", err)
	}
	if err := json.Unmarshal(c, &p.claims); err != nil || p.claims == nil {
		return bad("claims are not a JSON object")
	}
	if p.signature, err = base64.RawURLEncoding.DecodeString(parts[2]); err != nil {
		return bad("signature: %v", err)
	}
	p.signingInput = []byte(parts[0] + "." + parts[1])
	return &p, nil
}

// jwk is one key of a JWKS document (RFC 7517/7518/8037).
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// publicKey is a JWKS key ready to verify, with the one algorithm it takes.
type publicKey struct {
	alg string
	key crypto.PublicKey
}

func b64int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("bad base64url integer")
	}
	return new(big.Int).SetBytes(b), nil
}

// toKey converts a JWK. Only signing keys of RS256, ES256 and EdDSA are
// taken; anything else is skipped (ok false).
func (k jwk) toKey() (publicKey, bool) {
	if k.Use != "" && k.Use != "sig" {
		return publicKey{}, false
	}
	switch k.Kty {
	case "RSA":
		if k.Alg != "" && k.Alg != "RS256" {
			return publicKey{}, false
		}
		n, err1 := b64int(k.N)
		e, err2 := b64int(k.E)
		if err1 != nil || err2 != nil || n.BitLen() < 2048 || !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31 {
			return publicKey{}, false
		}
		return publicKey{"RS256", &rsa.PublicKey{N: n, E: int(e.Int64())}}, true
	case "EC":
		if k.Crv != "P-256" || (k.Alg != "" && k.Alg != "ES256") {
			return publicKey{}, false
		}
		x, err1 := base64.RawURLEncoding.DecodeString(k.X)
		y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
		if err1 != nil || err2 != nil || len(x) != 32 || len(y) != 32 {
			return publicKey{}, false
		}
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return publicKey{}, false
		}
		return publicKey{"ES256", pub}, true
	case "OKP":
		if k.Crv != "Ed25519" || (k.Alg != "" && k.Alg != "EdDSA" && k.Alg != "Ed25519") {
			return publicKey{}, false
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return publicKey{}, false
		}
		return publicKey{"EdDSA", ed25519.PublicKey(x)}, true
	}
	return publicKey{}, false
}

func (k publicKey) verify(alg string, input, sig []byte) bool {
	if alg == "Ed25519" {
		alg = "EdDSA"
	}
	if alg != k.alg {
		return false
	}
	switch pub := k.key.(type) {
	case *rsa.PublicKey:
		sum := sha256.Sum256(input)
		return rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) == nil
	case *ecdsa.PublicKey:
		if len(sig) != 64 {
			return false
		}
		sum := sha256.Sum256(input)
		return ecdsa.Verify(pub, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
	case ed25519.PublicKey:
		return ed25519.Verify(pub, input, sig)
	}
	return false
}

// JWKS is a key set fetched from a URL and cached: read at first use,
// again after TTL, and at most once per MinRefresh when a token names a
// key id the cached set lacks (the issuer rotated its keys) or after a
// fetch failed (keys held go on verifying meanwhile; with none held, the
// failure stands coldRetry).
type JWKS struct {
	URL        string
	Client     *http.Client
	TTL        time.Duration
	MinRefresh time.Duration
	Now        func() time.Time

	mu      sync.Mutex
	keys    map[string][]publicKey // by kid ("" holds every key)
	fetched time.Time
	failed  time.Time // the last fetch that failed (zero: none since the last that succeeded)
}

// coldRetry is how long a failed fetch stands while no keys are held (a
// cold start during an identity provider's outage): every call fails
// either way, and without it each would wait for its own failing fetch.
// Shorter than MinRefresh, so a provider that comes back is used soon.
const coldRetry = 5 * time.Second

func (s *JWKS) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// keysFor returns the candidate keys for kid, fetching the set when it is
// missing, stale, or lacks kid (rate-limited).
func (s *JWKS) keysFor(ctx context.Context, kid string) ([]publicKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ttl, minRefresh := s.TTL, s.MinRefresh
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	if minRefresh <= 0 {
		minRefresh = time.Minute
	}
	stale := s.keys == nil || now.Sub(s.fetched) >= ttl
	_, known := s.keys[kid]
	due := stale || (!known && now.Sub(s.fetched) >= minRefresh)
	// A failed fetch is tried again a MinRefresh later (coldRetry while no
	// keys are held), not by every call: each would wait for its own
	// failing fetch (up to the client's timeout on a hung provider) for
	// as long as the outage lasts, while the keys held still verify.
	wait := minRefresh
	if s.keys == nil {
		wait = min(coldRetry, minRefresh)
	}
	if due && !s.failed.IsZero() && now.Sub(s.failed) < wait {
		due = false
	}
	if due {
		keys, err := s.fetch(ctx)
		switch {
		case err != nil:
			s.failed = now
			if s.keys == nil {
				return nil, err
			}
		default:
			s.keys, s.fetched, s.failed = keys, now, time.Time{}
		}
	}
	if s.keys == nil {
		return nil, errors.New("authorizer: jwks: not read yet (the last read failed)")
	}
	return s.keys[kid], nil
}

func (s *JWKS) fetch(ctx context.Context) (map[string][]publicKey, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	if s.Client != nil {
		cc := *s.Client
		c = &cc
	}
	// A redirect is held to the configured URL's rule (https, or http to
	// this machine): an https key set redirected to plain http is read in
	// clear one hop later, and anyone on that path could serve keys of
	// their own (TestOutsideKeySetRedirectToPlainHTTPIsNotFollowed).
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !keySetURL(req.URL) {
			return fmt.Errorf("a redirect to %s, not https", req.URL.Redacted())
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	where := redactURL(s.URL) // a key set behind basic auth: its password is never logged
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("authorizer: jwks %s: cannot make the request", where)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("authorizer: jwks %s: %w", where, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("authorizer: jwks %s: status %d", where, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("authorizer: jwks %s: %w", where, err)
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("authorizer: jwks %s: larger than %d bytes", where, maxJWKSBytes)
	}
	keys, err := parseJWKS(b)
	if err == nil && len(keys) == 0 {
		// No signing key funduq can use: an identity provider's glitch
		// read as a new set would refuse every token until the next read
		// (TestOutsideEmptyKeySetKeepsTheKeysHeld), so it is a failed read.
		err = fmt.Errorf("authorizer: jwks %s: no RS256, ES256 or EdDSA signing key", where)
	}
	return keys, err
}

func parseJWKS(b []byte) (map[string][]publicKey, error) {
	var doc struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("authorizer: jwks: %w", err)
	}
	keys := map[string][]publicKey{}
	for _, k := range doc.Keys {
		pk, ok := k.toKey()
		if !ok {
			continue
		}
		keys[k.Kid] = append(keys[k.Kid], pk)
		if k.Kid != "" {
			keys[""] = append(keys[""], pk)
		}
	}
	return keys, nil
}

// JWTVerifier verifies bearer tokens against a JWKS: the signature (RS256,
// ES256 or EdDSA only; never "none" or a shared-secret HS*), exp (required),
// nbf and iat within Leeway, iss equal to Issuer and Audience among aud.
type JWTVerifier struct {
	Keys     *JWKS
	Issuer   string
	Audience string
	Leeway   time.Duration
	Now      func() time.Time
}

// Verify returns the token's claims. Every refusal wraps ErrBadToken; a key
// set that cannot be fetched is an error that does not.
func (v *JWTVerifier) Verify(ctx context.Context, tok string) (*Token, error) {
	p, err := parseJWT(tok)
	if err != nil {
		return nil, err
	}
	switch p.header.Alg {
	case "RS256", "ES256", "EdDSA", "Ed25519":
	default:
		return nil, fmt.Errorf("%w: algorithm %q is not accepted", ErrBadToken, p.header.Alg)
	}
	keys, err := v.Keys.keysFor(ctx, p.header.Kid)
	if err != nil {
		return nil, err
	}
	ok := false
	for _, k := range keys {
		if k.verify(p.header.Alg, p.signingInput, p.signature) {
			ok = true
			break
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: the signature does not verify against the key set", ErrBadToken)
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	if err := v.checkClaims(p.claims, now); err != nil {
		return nil, err
	}
	return &Token{Alg: p.header.Alg, Kid: p.header.Kid, Claims: p.claims}, nil
}

// NumericDate bounds: years 1 to 9999. Outside them int64(f) is left to
// the CPU (amd64 wraps a large value to the far past, arm64 saturates it
// to the far future), so one token would get different answers on the
// test machine and on the Lambdas' arm64; it is refused instead.
const (
	minNumericDate = -62135596800 // 0001-01-01T00:00:00Z
	maxNumericDate = 253402300799 // 9999-12-31T23:59:59Z
)

func numericDate(raw json.RawMessage) (time.Time, bool) {
	var f float64
	if json.Unmarshal(raw, &f) != nil || f < minNumericDate || f > maxNumericDate {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}

func (v *JWTVerifier) checkClaims(c map[string]json.RawMessage, now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadToken, fmt.Sprintf(format, args...))
	}
	exp, ok := numericDate(c["exp"])
	if !ok {
		return bad("exp is missing or not a number")
	}
	if !now.Before(exp.Add(v.Leeway)) {
		return bad("expired")
	}
	if raw, present := c["nbf"]; present {
		nbf, ok := numericDate(raw)
		if !ok || now.Add(v.Leeway).Before(nbf) {
			return bad("not valid yet")
		}
	}
	if raw, present := c["iat"]; present {
		iat, ok := numericDate(raw)
		if !ok || now.Add(v.Leeway).Before(iat) {
			return bad("issued in the future")
		}
	}
	var iss string
	if json.Unmarshal(c["iss"], &iss) != nil || iss != v.Issuer {
		return bad("issuer is not %q", v.Issuer)
	}
	var one string
	var many []string
	switch {
	case json.Unmarshal(c["aud"], &one) == nil:
		many = []string{one}
	case json.Unmarshal(c["aud"], &many) == nil:
	default:
		return bad("aud is missing")
	}
	for _, a := range many {
		if a == v.Audience {
			return nil
		}
	}
	return bad("audience %q is not among %q", v.Audience, many)
}
