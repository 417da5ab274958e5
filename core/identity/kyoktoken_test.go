package identity

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestKyokTokenSpecExample(t *testing.T) {
	secret := []byte(kyokExampleSecret)
	if got := MintKyokToken(secret, kyokExampleClaims); got != kyokExampleToken {
		t.Fatalf("MintKyokToken\n got  %s\n want %s", got, kyokExampleToken)
	}
	c, err := VerifyKyokToken(secret, kyokExampleToken, time.Unix(1755500000, 0))
	if err != nil {
		t.Fatalf("VerifyKyokToken: %v", err)
	}
	if c != kyokExampleClaims {
		t.Fatalf("claims = %+v", c)
	}
}

func TestKyokTokenClaimsRendering(t *testing.T) {
	c := KyokClaims{RunID: "run<1>&", ProviderKey: testKeyA5, AgentName: "翻訳 😀\"", Exp: 42}
	want := `{"runId": "run<1>&", "providerKey": "` + testKeyA5 + `", "agentName": "\u7ffb\u8a33 \ud83d\ude00\"", "exp": 42}`
	if got := string(kyokClaimsJSON(c)); got != want {
		t.Fatalf("\n got  %s\n want %s", got, want)
	}
	secret := []byte("s")
	back, err := VerifyKyokToken(secret, MintKyokToken(secret, c), time.Unix(42, 0))
	if err != nil || back != c {
		t.Fatalf("round trip = %+v, %v", back, err)
	}
}

func TestNewKyokClaims(t *testing.T) {
	c := NewKyokClaims("r", testKeyA5, "a", time.Unix(1000, 0))
	if c.Exp != 1000+3600 {
		t.Fatalf("exp = %d", c.Exp)
	}
}

func TestVerifyKyokTokenRefuses(t *testing.T) {
	secret := []byte(kyokExampleSecret)
	now := time.Unix(1755500000, 0)
	body, mac, _ := strings.Cut(kyokExampleToken, ".")
	// mintRaw MACs arbitrary claims bytes, to show what happens after the MAC passes.
	mintRaw := func(claims string) string {
		b := base64.URLEncoding.EncodeToString([]byte(claims))
		return b + "." + kyokMAC(secret, b)
	}
	expired := MintKyokToken(secret, KyokClaims{RunID: "r", ProviderKey: testKeyA5, AgentName: "a", Exp: 1755500000 - 1})
	atNow := MintKyokToken(secret, KyokClaims{RunID: "r", ProviderKey: testKeyA5, AgentName: "a", Exp: 1755500000})

	for _, tc := range []struct {
		name   string
		secret []byte
		token  string
		now    time.Time
		want   error
	}{
		{"wrong secret", []byte("another-secret"), kyokExampleToken, now, ErrBadToken},
		{"empty secret", nil, MintKyokToken(nil, kyokExampleClaims), now, ErrBadToken},
		{"no dot", secret, body, now, ErrBadToken},
		{"empty", secret, "", now, ErrBadToken},
		{"claims tampered", secret, "f" + body[1:] + "." + mac, now, ErrBadToken},
		{"MAC tampered", secret, body + "." + flipHex(mac, 5), now, ErrBadToken},
		{"MAC uppercase", secret, body + "." + strings.ToUpper(mac), now, ErrBadToken},
		{"MAC truncated", secret, body + "." + mac[:63], now, ErrBadToken},
		{"extra segment", secret, kyokExampleToken + ".x", now, ErrBadToken},
		{"expired", secret, expired, now, ErrTokenExpired},
		{"exp is now but now is later within the second", secret, atNow, now.Add(time.Nanosecond), ErrTokenExpired},
		{"example far in the future", secret, kyokExampleToken, time.Unix(9999999999+1, 0), ErrTokenExpired},
		{"claims not base64", secret, "%%%" + "." + kyokMAC(secret, "%%%"), now, ErrBadToken},
		{"claims unpadded base64", secret, strings.TrimRight(base64.URLEncoding.EncodeToString([]byte(`{"a": 1}`)), "=") + "." + kyokMAC(secret, strings.TrimRight(base64.URLEncoding.EncodeToString([]byte(`{"a": 1}`)), "=")), now, ErrBadToken},
		{"claims not JSON", secret, mintRaw("nope"), now, ErrBadToken},
		{"claims an array", secret, mintRaw("[]"), now, ErrBadToken},
		{"empty agent", secret, MintKyokToken(secret, KyokClaims{RunID: "r", ProviderKey: testKeyA5, Exp: 9999999999}), now, ErrBadToken},
		{"empty run", secret, MintKyokToken(secret, KyokClaims{ProviderKey: testKeyA5, AgentName: "a", Exp: 9999999999}), now, ErrBadToken},
		{"empty provider", secret, MintKyokToken(secret, KyokClaims{RunID: "r", AgentName: "a", Exp: 9999999999}), now, ErrBadToken},
		{"agent not a string", secret, mintRaw(`{"runId": "r", "providerKey": "p", "agentName": 1, "exp": 9999999999}`), now, ErrBadToken},
		{"exp missing", secret, mintRaw(`{"runId": "r", "providerKey": "p", "agentName": "a"}`), now, ErrBadToken},
		{"exp a string", secret, mintRaw(`{"runId": "r", "providerKey": "p", "agentName": "a", "exp": "9999999999"}`), now, ErrBadToken},
		{"exp a float", secret, mintRaw(`{"runId": "r", "providerKey": "p", "agentName": "a", "exp": 9999999999.5}`), now, ErrBadToken},
		{"exp overflows int64", secret, mintRaw(`{"runId": "r", "providerKey": "p", "agentName": "a", "exp": 99999999999999999999}`), now, ErrBadToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyKyokToken(tc.secret, tc.token, tc.now)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}

	if _, err := VerifyKyokToken(secret, atNow, now); err != nil {
		t.Fatalf("exp == now must still verify: %v", err)
	}
	if _, err := VerifyKyokToken(secret, mintRaw(`{"runId": "r", "providerKey": "p", "agentName": "a", "exp": 9999999999, "future": true}`), now); err != nil {
		t.Fatalf("an extra claim in a genuine token must be ignored: %v", err)
	}
}
