package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// KyokTokenTTL is how long a minted KYOK token lives; it also dies with its run,
// which the caller checks per call.
const KyokTokenTTL = time.Hour

// KyokClaims is what a KYOK bearer token grants: calls by one agent
// (ProviderKey, AgentName) for one run, until Exp (Unix seconds).
type KyokClaims struct {
	RunID       string
	ProviderKey string
	AgentName   string
	Exp         int64
}

// NewKyokClaims returns claims expiring KyokTokenTTL after now.
func NewKyokClaims(runID, providerKey, agentName string, now time.Time) KyokClaims {
	return KyokClaims{RunID: runID, ProviderKey: providerKey, AgentName: agentName, Exp: now.Add(KyokTokenTTL).Unix()}
}

// kyokClaimsJSON renders claims exactly as Python's json.dumps does by default
// (", " and ": " separators, ensure_ascii), in the fixed key order, so tokens
// stay interchangeable with the Python tools.
func kyokClaimsJSON(c KyokClaims) []byte {
	b := append([]byte(nil), `{"runId": `...)
	b = appendPyJSONString(b, c.RunID)
	b = append(b, `, "providerKey": `...)
	b = appendPyJSONString(b, c.ProviderKey)
	b = append(b, `, "agentName": `...)
	b = appendPyJSONString(b, c.AgentName)
	b = append(b, `, "exp": `...)
	b = append(b, itoa(c.Exp)...)
	return append(b, '}')
}

func kyokMAC(secret []byte, body string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// MintKyokToken returns B "." hex(HMAC-SHA256(secret, B)) where B is the
// padded base64url of the claims JSON. Only funduq mints and verifies these;
// providers treat them as opaque. secret must be non-empty: VerifyKyokToken
// refuses every token under an empty secret.
func MintKyokToken(secret []byte, c KyokClaims) string {
	body := base64.URLEncoding.EncodeToString(kyokClaimsJSON(c))
	return body + "." + kyokMAC(secret, body)
}

// VerifyKyokToken checks a token's MAC in constant time before reading
// anything from it, then requires runId, providerKey and agentName to be
// non-empty strings and exp (an integer) not to have passed at now. Refusals
// wrap ErrBadToken, except a genuine token past its exp, which wraps
// ErrTokenExpired.
func VerifyKyokToken(secret []byte, token string, now time.Time) (KyokClaims, error) {
	if len(secret) == 0 {
		// An empty HMAC key is public knowledge; refusing beats accepting forgeries.
		return KyokClaims{}, fmt.Errorf("%w: no signing secret configured", ErrBadToken)
	}
	body, mac, ok := strings.Cut(token, ".")
	if !ok {
		return KyokClaims{}, fmt.Errorf("%w: no '.' separating claims and MAC", ErrBadToken)
	}
	if !hmac.Equal([]byte(mac), []byte(kyokMAC(secret, body))) {
		return KyokClaims{}, fmt.Errorf("%w: MAC does not match", ErrBadToken)
	}
	raw, err := base64.URLEncoding.Strict().DecodeString(body)
	if err != nil {
		return KyokClaims{}, fmt.Errorf("%w: claims are not padded base64url: %w", ErrBadToken, err)
	}
	// Unknown keys are ignored: the MAC already proves funduq minted this.
	m, err := jsonObject(raw)
	if err != nil {
		return KyokClaims{}, fmt.Errorf("%w: claims: %w", ErrBadToken, err)
	}
	var c KyokClaims
	for _, f := range []struct {
		key string
		dst *string
	}{{"runId", &c.RunID}, {"providerKey", &c.ProviderKey}, {"agentName", &c.AgentName}} {
		s, ok := jsonString(m[f.key])
		if !ok || s == "" {
			return KyokClaims{}, fmt.Errorf("%w: claim %q is missing, empty or not a string", ErrBadToken, f.key)
		}
		*f.dst = s
	}
	exp, ok := jsonInt(m["exp"])
	if !ok {
		return KyokClaims{}, fmt.Errorf("%w: claim \"exp\" is missing or not an integer", ErrBadToken)
	}
	c.Exp = exp
	// exp ≥ now, judged at now's full precision (the reference compares with a
	// float clock) without building a time from an arbitrary exp.
	if nowS := now.Unix(); exp < nowS || (exp == nowS && now.Nanosecond() > 0) {
		return KyokClaims{}, fmt.Errorf("%w: exp %d is before %s", ErrTokenExpired, exp, now.UTC().Format(time.RFC3339))
	}
	return c, nil
}
