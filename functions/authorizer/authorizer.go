// Package authorizer is funduq's API Gateway REQUEST authorizer: the
// authenticating seat of design.md D12 in an AWS deployment. It authenticates a
// caller of the doors by the Funduq-Presenter signature, or by a bearer
// JWT an operator's identity provider issued (verified against its JWKS
// URL), and returns the caller's Ed25519 public key in the authorizer
// context (funduqKey), which the doors' Lambda glue reads from
// requestContext.authorizer and nowhere else.
//
// A REQUEST authorizer never sees the body, and a presenter signature
// covers sha256(body): the caller declares that digest in the
// Funduq-Body-Sha256 header (on GET and other bodyless methods the empty
// body's is assumed), the authorizer verifies the signature over it and
// returns it as bodySha256, and the door refuses a body that does not hash
// to it. A proof on a body without the digest header is left to the door
// (which verifies it against the body, as with no authorizer) when
// anonymous callers are allowed, and refused when they are not.
package authorizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
)

// BodyDigestHeader declares the lowercase hex sha256 of the request body a
// Funduq-Presenter signature covers (the authorizer cannot read the body).
const BodyDigestHeader = "Funduq-Body-Sha256"

// Context keys of an Allow (the same names the doors' glue reads:
// door.AuthorizerKeyField, door.AuthorizerBodyField).
const (
	ContextKey  = "funduqKey"
	ContextBody = "bodySha256"
	ContextVia  = "via"
)

// ErrUnauthorized is what API Gateway turns into 401 Unauthorized: the
// exact error message it recognises.
var ErrUnauthorized = errors.New("Unauthorized")

// Config is the authorizer's settings (environment of its Lambda).
type Config struct {
	// JWKSURL enables bearer JWTs: the issuer's key set.
	JWKSURL string `env:"FUNDUQ_AUTH_JWKS_URL"`
	// Issuer and Audience a JWT must carry (both required with JWKSURL).
	Issuer   string `env:"FUNDUQ_AUTH_JWT_ISSUER"`
	Audience string `env:"FUNDUQ_AUTH_JWT_AUDIENCE"`
	// KeyClaim names the claim holding the caller's Ed25519 public key (64 hex).
	KeyClaim string `env:"FUNDUQ_AUTH_JWT_KEY_CLAIM" envDefault:"funduq_key"`
	// AllowAnonymous lets a request with no credential at all through,
	// without a key (the doors then serve it as an anonymous caller).
	AllowAnonymous bool `env:"FUNDUQ_AUTH_ALLOW_ANONYMOUS" envDefault:"true"`
	// Leeway for a JWT's time claims.
	Leeway time.Duration `env:"FUNDUQ_AUTH_JWT_LEEWAY" envDefault:"60s"`
}

// ParseConfig reads the authorizer's settings from environ (its Lambda
// hands in os.Environ) and checks them: every error names the variable
// (core/config.ParseInto), so a cold start with a bad setting stops with one
// line saying which.
func ParseConfig(environ map[string]string) (Config, error) {
	var c Config
	if err := config.ParseInto(&c, environ); err != nil {
		return Config{}, err
	}
	return c, c.Check()
}

// Check refuses an incomplete or unsafe configuration, naming the
// variable.
// MaxLeeway is the largest FUNDUQ_AUTH_JWT_LEEWAY Check takes.
const MaxLeeway = 10 * time.Minute

func (c Config) Check() error {
	if c.Leeway < 0 {
		return fmt.Errorf("authorizer: FUNDUQ_AUTH_JWT_LEEWAY %s is negative (it widens a token's time claims; 0 for none)", c.Leeway)
	}
	// A leeway covers clocks that differ by seconds; one of hours takes
	// tokens that expired hours ago (a "24h" meant as a token's lifetime).
	if c.Leeway > MaxLeeway {
		return fmt.Errorf("authorizer: FUNDUQ_AUTH_JWT_LEEWAY %s is over %s (it lets an expired token through for that long; the default is 60s)", c.Leeway, MaxLeeway)
	}
	if c.JWKSURL == "" {
		if c.Issuer != "" || c.Audience != "" {
			return errors.New("authorizer: FUNDUQ_AUTH_JWT_ISSUER/AUDIENCE need FUNDUQ_AUTH_JWKS_URL")
		}
		return nil
	}
	if err := checkJWKSURL(c.JWKSURL); err != nil {
		return err
	}
	if c.Issuer == "" || c.Audience == "" {
		return errors.New("authorizer: with FUNDUQ_AUTH_JWKS_URL, set FUNDUQ_AUTH_JWT_ISSUER and FUNDUQ_AUTH_JWT_AUDIENCE")
	}
	if c.KeyClaim == "" {
		return errors.New("authorizer: FUNDUQ_AUTH_JWT_KEY_CLAIM is empty")
	}
	return nil
}

// checkJWKSURL takes an https URL with a host, or http to this machine (a
// test's or a sidecar's key set). The key set decides whose tokens verify:
// fetched in clear across the internet (the authorizer is outside the
// VPC), anyone on the path could hand it keys of their own and mint a
// token for any caller key (docs/design.md §Deployment).
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Hostname() == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("authorizer: FUNDUQ_AUTH_JWKS_URL %q is not an https URL with a host", redactURL(raw))
	}
	if !keySetURL(u) {
		return fmt.Errorf("authorizer: FUNDUQ_AUTH_JWKS_URL %q is plain http: use https (http only to this machine)", redactURL(raw))
	}
	return nil
}

// keySetURL reports whether a key set may be read from u: over https, or
// over http to this machine. The configured URL and every redirect it
// leads to are held to it (JWKS.fetch).
func keySetURL(u *url.URL) bool {
	return u.Hostname() != "" && (u.Scheme == "https" || (u.Scheme == "http" && loopback(u.Hostname())))
}

// redactURL hides a URL's password (a key set behind basic auth): nothing
// secret is logged (docs/design.md §Logs).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Authorizer decides one request.
type Authorizer struct {
	cfg Config
	jwt *JWTVerifier // nil without a JWKS URL
	log *slog.Logger
	now func() time.Time
}

// Options are test seams.
type Options struct {
	Client *http.Client
	Now    func() time.Time
	Log    *slog.Logger
}

// New builds an authorizer from a checked configuration.
func New(cfg Config, o Options) (*Authorizer, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	a := &Authorizer{cfg: cfg, log: o.Log, now: o.Now}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.now == nil {
		a.now = time.Now
	}
	if cfg.JWKSURL != "" {
		a.jwt = &JWTVerifier{Keys: &JWKS{URL: cfg.JWKSURL, Client: o.Client, Now: a.now},
			Issuer: cfg.Issuer, Audience: cfg.Audience, Leeway: cfg.Leeway, Now: a.now}
	}
	return a, nil
}

func header(h map[string]string, name string) (string, bool) {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// bodyless methods carry no body, so a presenter on them signs the empty one.
func bodyless(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

// Decision is what Authorize found: the caller's key ("" anonymous), the
// body digest the key is bound to, and how it was shown.
type Decision struct {
	Key, BodySHA256, Via string
}

// Decide authenticates a request. Errors: ErrUnauthorized for any
// credential that does not verify (or none, unless anonymous callers are
// allowed); another error when the key set cannot be fetched.
func (a *Authorizer) Decide(ctx context.Context, ev *events.APIGatewayCustomAuthorizerRequestTypeRequest) (Decision, error) {
	deny := func(reason string, args ...any) (Decision, error) {
		a.log.Info("caller refused", "reason", fmt.Sprintf(reason, args...), "method", ev.HTTPMethod, "path", ev.Path,
			"request_id", ev.RequestContext.RequestID)
		return Decision{}, ErrUnauthorized
	}
	var d Decision
	if v, ok := header(ev.Headers, identity.PresenterHeader); ok {
		digest, declared := header(ev.Headers, BodyDigestHeader)
		switch {
		case !declared && !bodyless(ev.HTTPMethod):
			// Without the digest only the door, which has the body, can
			// check the proof: it does (door.PresenterKey), exactly as
			// with no authorizer. A deployment that admits only
			// authenticated callers cannot let it through unverified.
			if !a.cfg.AllowAnonymous {
				return deny("a %s on a %s needs %s (the sha256 of the body it signs)", identity.PresenterHeader, ev.HTTPMethod, BodyDigestHeader)
			}
		default:
			if !declared {
				digest = identity.SHA256Hex(nil)
			}
			if len(digest) != 64 || !isHex(digest) {
				return deny("%s is not 64 lowercase hex characters", BodyDigestHeader)
			}
			key, err := identity.ParsePresenterHeaderDigest(v, digest, a.now())
			if err != nil {
				return deny("presenter: %v", err)
			}
			d = Decision{Key: key, BodySHA256: digest, Via: "presenter"}
		}
	}
	if v, ok := header(ev.Headers, "Authorization"); ok {
		// The scheme is case-insensitive (RFC 9110 §11.1), as the KYOK
		// door reads it.
		scheme, tok, _ := strings.Cut(v, " ")
		if !strings.EqualFold(scheme, "Bearer") || a.jwt == nil {
			return deny("an Authorization header that is not an accepted bearer token")
		}
		t, err := a.jwt.Verify(ctx, strings.TrimSpace(tok))
		if err != nil {
			if !errors.Is(err, ErrBadToken) {
				return Decision{}, err
			}
			return deny("%v", err)
		}
		var key string
		if json.Unmarshal(t.Claims[a.cfg.KeyClaim], &key) != nil || !identity.IsPublicKeyHex(key) {
			return deny("token claim %s is not a 64-hex public key", a.cfg.KeyClaim)
		}
		if d.Key != "" && d.Key != key {
			return deny("the presenter and the token name different keys")
		}
		if d.Key == "" {
			d = Decision{Key: key, Via: "jwt"}
		}
	}
	if d.Key == "" && !a.cfg.AllowAnonymous {
		return deny("no credential")
	}
	if d.Key == "" {
		d.Via = "anonymous"
	}
	return d, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Authorize is the Lambda handler: an Allow policy for the invoked method
// with the caller's key in the context, or ErrUnauthorized (401).
func (a *Authorizer) Authorize(ctx context.Context, ev events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	d, err := a.Decide(ctx, &ev)
	if err != nil {
		if !errors.Is(err, ErrUnauthorized) {
			a.log.Error("authorizer could not decide", "err", err, "request_id", ev.RequestContext.RequestID)
		}
		return events.APIGatewayCustomAuthorizerResponse{}, err
	}
	principal := d.Key
	if principal == "" {
		principal = "anonymous"
	}
	out := events.APIGatewayCustomAuthorizerResponse{
		PrincipalID: principal,
		PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{Version: "2012-10-17",
			Statement: []events.IAMPolicyStatement{{Action: []string{"execute-api:Invoke"}, Effect: "Allow",
				Resource: []string{ev.MethodArn}}}},
		Context: map[string]any{ContextVia: d.Via},
	}
	if d.Key != "" {
		out.Context[ContextKey] = d.Key
	}
	if d.BodySHA256 != "" {
		out.Context[ContextBody] = d.BodySHA256
	}
	return out, nil
}
