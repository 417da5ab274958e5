package authorizer

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The authorizer takes a Funduq-Presenter proof built from the published
// template alone (testdata/reference: funduq-server-wire-vectors-v4.json's
// presenter_proof payload, signed with contract-vectors.json's test key),
// byte for byte, and nothing a byte off — not only what our own builder
// (identity.MakePresenterHeader) makes, which its other tests use.
func TestOutsidePresenterProofFromThePublishedTemplate(t *testing.T) {
	dir := filepath.Join("..", "..", "testdata", "reference")
	read := func(name string, into any) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("contract vectors missing from the checkout: %v", err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatal(err)
		}
	}
	var wire struct {
		PresenterProof struct {
			Header  string `json:"header"`
			Payload string `json:"payload"`
		} `json:"presenter_proof"`
	}
	var contract struct {
		TestKey struct {
			Private string `json:"private_key_hex"`
			Public  string `json:"public_key_hex"`
		} `json:"test_key"`
	}
	read("funduq-server-wire-vectors-v4.json", &wire)
	read("contract-vectors.json", &contract)
	seed, err := hex.DecodeString(contract.TestKey.Private)
	if err != nil || len(seed) != ed25519.SeedSize {
		t.Fatalf("test key: %v", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	body := []byte(`{"threadId":"new","messages":[{"id":"m1","role":"user","content":"hi"}]}`)
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	ts := now.Unix()
	proof := func(pub string, ts int64, digest string) string {
		payload := strings.NewReplacer("{publicKey}", pub, "{timestamp}", strconv.FormatInt(ts, 10),
			"{sha256hex(request_body)}", digest).Replace(wire.PresenterProof.Payload)
		sig := hex.EncodeToString(ed25519.Sign(priv, []byte(payload)))
		return `{"publicKey":"` + pub + `","timestamp":` + strconv.FormatInt(ts, 10) + `,"signature":"` + sig + `"}`
	}
	a := newAuth(t, nil, false)
	decide := func(h map[string]string) (Decision, error) {
		ev := request("POST", h)
		return a.Decide(context.Background(), &ev)
	}
	d, err := decide(map[string]string{wire.PresenterProof.Header: proof(contract.TestKey.Public, ts, digest), BodyDigestHeader: digest})
	if err != nil || d.Key != contract.TestKey.Public || d.BodySHA256 != digest || d.Via != "presenter" {
		t.Fatalf("a proof from the published template: %+v %v", d, err)
	}
	other := sha256.Sum256(append(body, ' '))
	for name, h := range map[string]map[string]string{
		"signed over another body": {wire.PresenterProof.Header: proof(contract.TestKey.Public, ts, hex.EncodeToString(other[:])), BodyDigestHeader: digest},
		"signed another second":    {wire.PresenterProof.Header: strings.Replace(proof(contract.TestKey.Public, ts+1, digest), strconv.FormatInt(ts+1, 10), strconv.FormatInt(ts, 10), 1), BodyDigestHeader: digest},
		"stale":                    {wire.PresenterProof.Header: proof(contract.TestKey.Public, ts-int64(2*time.Minute/time.Second), digest), BodyDigestHeader: digest},
		"digest in upper case":     {wire.PresenterProof.Header: proof(contract.TestKey.Public, ts, digest), BodyDigestHeader: strings.ToUpper(digest)},
		"key named in upper case":  {wire.PresenterProof.Header: proof(strings.ToUpper(contract.TestKey.Public), ts, digest), BodyDigestHeader: digest},
	} {
		if d, err := decide(h); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("%s: %+v %v, want 401", name, d, err)
		}
	}
}
