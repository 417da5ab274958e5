package identity_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/identity"
)

// referenceDir holds the published contract vectors, copied into the
// repository (testdata/reference/README.md names their source).
var referenceDir = filepath.Join("..", "..", "testdata", "reference")

// requireReference returns the reference folder, failing when it is absent.
func requireReference(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(referenceDir); err != nil {
		t.Fatalf("contract vectors missing from the checkout (%s): %v", referenceDir, err)
	}
	return referenceDir
}

type contractFile struct {
	TestKey struct {
		Algorithm     string `json:"algorithm"`
		PrivateKeyHex string `json:"private_key_hex"`
		PublicKeyHex  string `json:"public_key_hex"`
	} `json:"test_key"`
	Vectors []struct {
		Kind         string                     `json:"kind"`
		Inputs       map[string]json.RawMessage `json:"inputs"`
		PayloadUTF8  string                     `json:"payload_utf8"`
		SignatureHex string                     `json:"signature_hex"`
	} `json:"vectors"`
	Wire []struct {
		Kind  string          `json:"kind"`
		Frame json.RawMessage `json:"frame"`
	} `json:"wire"`
	Chains []struct {
		Kind   string `json:"kind"`
		Inputs struct {
			HopPrivateKeysHex []string `json:"hop_private_keys_hex"`
		} `json:"inputs"`
		Chain           []string `json:"chain"`
		ActorPublicKeys []string `json:"actor_public_keys"`
	} `json:"chains"`
}

// knownSections are the top-level keys this test understands; a new section
// (say, a new vector family) must fail the test until it is covered.
var knownSections = []string{"contract", "comment", "test_key", "vectors", "wire", "chains"}

func TestContractVectors(t *testing.T) {
	dir := requireReference(t)
	for _, name := range []string{"contract-vectors.json", "contract-vectors-rev22-via-funduq-server.json"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read %s: %v", path, err)
			}
			checkContractFile(t, data)
		})
	}
}

func checkContractFile(t *testing.T, data []byte) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatalf("parse: %v", err)
	}
	for k := range top {
		if !slices.Contains(knownSections, k) {
			t.Errorf("unknown top-level section %q: this test must be taught to check it", k)
		}
	}
	var cf contractFile
	if err := json.Unmarshal(data, &cf); err != nil {
		t.Fatalf("parse: %v", err)
	}
	if cf.TestKey.Algorithm != "Ed25519" {
		t.Fatalf("test_key.algorithm = %q", cf.TestKey.Algorithm)
	}
	testKey := mustSigner(t, cf.TestKey.PrivateKeyHex)
	if testKey.PublicKeyHex() != cf.TestKey.PublicKeyHex {
		t.Fatalf("test key public = %s, file says %s", testKey.PublicKeyHex(), cf.TestKey.PublicKeyHex)
	}

	total := len(cf.Vectors) + len(cf.Wire) + len(cf.Chains)
	checked := 0

	for i, v := range cf.Vectors {
		t.Run("vectors/"+v.Kind, func(t *testing.T) {
			in := inputReader{t: t, m: v.Inputs, used: map[string]bool{"note": true}}
			var got []byte
			switch v.Kind {
			case "kyok-call":
				body := []byte(in.str("body_utf8"))
				if h := identity.SHA256Hex(body); h != in.str("body_sha256_hex") {
					t.Errorf("body sha256 = %s, want %s", h, in.str("body_sha256_hex"))
				}
				got = identity.KyokCallPayload(in.str("bearer"), in.int("timestamp"), body)
			case "provider-connect":
				got = identity.ProviderConnectPayload(in.str("funduq_public_key"), in.str("funduq_nonce"), in.str("provider_nonce"))
			case "funduq-connect":
				got = identity.FunduqConnectPayload(in.str("funduq_nonce"), in.str("provider_nonce"))
			case "resolution":
				got = identity.ResolutionPayload(in.str("run_id"), in.strs("ask_ids"))
			case "cancel":
				got = identity.CancelPayload(in.str("run_id"), in.int("timestamp"))
			case "view":
				got = identity.ViewPayload(in.str("run_id"), in.int("timestamp"))
			default:
				t.Fatalf("vectors[%d]: unknown kind %q: teach this test to rebuild it", i, v.Kind)
			}
			in.allUsed()
			if !bytes.Equal(got, []byte(v.PayloadUTF8)) {
				t.Fatalf("payload\n got  %q\n want %q", got, v.PayloadUTF8)
			}
			if sig := testKey.Sign(got); sig != v.SignatureHex {
				t.Fatalf("signature\n got  %s\n want %s", sig, v.SignatureHex)
			}
			if err := identity.Verify(testKey.PublicKey(), got, v.SignatureHex); err != nil {
				t.Fatalf("verify: %v", err)
			}
			tampered := append(slices.Clone(got), 'x')
			if err := identity.Verify(testKey.PublicKey(), tampered, v.SignatureHex); !errors.Is(err, identity.ErrBadSignature) {
				t.Fatalf("verify over other bytes: got %v, want ErrBadSignature", err)
			}
			checked++
		})
	}

	for i, c := range cf.Chains {
		t.Run("chains/"+c.Kind, func(t *testing.T) {
			if c.Kind != "actor-chain" {
				t.Fatalf("chains[%d]: unknown kind %q: teach this test to check it", i, c.Kind)
			}
			chain, err := identity.VerifyChain(c.Chain)
			if err != nil {
				t.Fatalf("VerifyChain: %v", err)
			}
			if got := chain.ActorKeys(); !slices.Equal(got, c.ActorPublicKeys) {
				t.Fatalf("actor keys = %v, want %v", got, c.ActorPublicKeys)
			}
			if len(c.Inputs.HopPrivateKeysHex) != len(c.Chain) {
				t.Fatalf("%d hop keys for %d hops", len(c.Inputs.HopPrivateKeysHex), len(c.Chain))
			}
			var prev *identity.Hop
			for j, seed := range c.Inputs.HopPrivateKeysHex {
				h, err := identity.SignHop(mustSigner(t, seed), prev, chain.Hops[j].DispatchedTo)
				if err != nil {
					t.Fatalf("SignHop %d: %v", j, err)
				}
				if h.Token != c.Chain[j] {
					t.Fatalf("hop %d token\n got  %s\n want %s", j, h.Token, c.Chain[j])
				}
				prev = &h
			}
			checked++
		})
	}

	for i, w := range cf.Wire {
		t.Run("wire/"+w.Kind, func(t *testing.T) {
			switch w.Kind {
			case "delivered-run":
				checkDeliveredRun(t, w.Frame)
			case "delivered-completion":
				// Only presence here; the envelope package round-trips the frame.
				var obj map[string]json.RawMessage
				if err := json.Unmarshal(w.Frame, &obj); err != nil || obj == nil {
					t.Fatalf("delivered-completion frame is not an object: %v", err)
				}
			default:
				t.Fatalf("wire[%d]: unknown kind %q: teach this test to check it", i, w.Kind)
			}
			checked++
		})
	}

	if checked != total {
		t.Fatalf("checked %d of %d entries", checked, total)
	}
	if total == 0 {
		t.Fatal("file holds no entries")
	}
}

func checkDeliveredRun(t *testing.T, raw json.RawMessage) {
	var frame struct {
		AgentName string `json:"agentName"`
		RunInput  struct {
			ForwardedProps struct {
				Funduq struct {
					ActorChain []string `json:"actorChain"`
				} `json:"funduq"`
			} `json:"forwardedProps"`
		} `json:"runInput"`
	}
	if err := json.Unmarshal(raw, &frame); err != nil {
		t.Fatalf("frame: %v", err)
	}
	tokens := frame.RunInput.ForwardedProps.Funduq.ActorChain
	chain, err := identity.VerifyChain(tokens)
	if err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	if chain.Len() != 2 {
		t.Fatalf("chain has %d hops, want 2", chain.Len())
	}
	if frame.AgentName != "translator" {
		t.Fatalf("agentName = %q, want translator", frame.AgentName)
	}
	funduq := mustSigner(t, strings.Repeat("b6", 32))
	provider := mustSigner(t, strings.Repeat("e1", 32))
	if !strings.HasPrefix(provider.PublicKeyHex(), "25fc32c4") {
		t.Fatalf("e1*32 public key = %s, want 25fc32c4…", provider.PublicKeyHex())
	}
	head := identity.Chain{Hops: chain.Hops[:1]}
	got, err := identity.AppendDispatchHop(head, funduq, provider.PublicKeyHex(), frame.AgentName)
	if err != nil {
		t.Fatalf("AppendDispatchHop: %v", err)
	}
	if !slices.Equal(got.Tokens(), tokens) {
		t.Fatalf("dispatch hop\n got  %s\n want %s", got.Hops[1].Token, tokens[1])
	}
	d := chain.Hops[1].DispatchedTo
	if d == nil || d.ProviderKey != provider.PublicKeyHex() || d.Name != "translator" {
		t.Fatalf("dispatchedTo = %+v", d)
	}
	want := identity.ChainSummary{HeadKey: chain.Hops[0].ActorKey, PresenterKey: funduq.PublicKeyHex(), Hops: 2}
	if s := chain.Summary(); s != want {
		t.Fatalf("summary = %+v, want %+v", s, want)
	}
}

// TestPresenterProofSpec ties PresenterPayload to the gateway's published
// template (the file publishes the layout, not a signed example).
func TestPresenterProofSpec(t *testing.T) {
	dir := requireReference(t)
	path := filepath.Join(dir, "funduq-server-wire-vectors-v4.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		PresenterProof struct {
			Header           string   `json:"header"`
			Value            []string `json:"value"`
			Payload          string   `json:"payload"`
			FreshnessSeconds int      `json:"freshness_seconds"`
		} `json:"presenter_proof"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	p := f.PresenterProof
	if p.Header != identity.PresenterHeader {
		t.Errorf("header = %q, want %q", p.Header, identity.PresenterHeader)
	}
	if p.FreshnessSeconds != int(identity.FreshnessWindow.Seconds()) {
		t.Errorf("freshness = %d, want %v", p.FreshnessSeconds, identity.FreshnessWindow)
	}
	if !slices.Equal(p.Value, []string{"publicKey", "timestamp", "signature"}) {
		t.Errorf("value fields = %v", p.Value)
	}
	body := []byte(`{"x":1}`)
	key := strings.Repeat("ab", 32)
	want := strings.NewReplacer("{publicKey}", key, "{timestamp}", "1755500000",
		"{sha256hex(request_body)}", identity.SHA256Hex(body)).Replace(p.Payload)
	if got := string(identity.PresenterPayload(key, 1755500000, body)); got != want {
		t.Errorf("presenter payload\n got  %s\n want %s", got, want)
	}
}

// inputReader reads vector inputs and remembers which it used, so an input the
// builder ignores (a drifted vector) fails the test instead of passing silently.
type inputReader struct {
	t    *testing.T
	m    map[string]json.RawMessage
	used map[string]bool
}

func (r inputReader) raw(k string) json.RawMessage {
	r.t.Helper()
	v, ok := r.m[k]
	if !ok {
		r.t.Fatalf("input %q missing", k)
	}
	r.used[k] = true
	return v
}

func (r inputReader) str(k string) string {
	r.t.Helper()
	var s string
	if err := json.Unmarshal(r.raw(k), &s); err != nil {
		r.t.Fatalf("input %q: %v", k, err)
	}
	return s
}

func (r inputReader) strs(k string) []string {
	r.t.Helper()
	var s []string
	if err := json.Unmarshal(r.raw(k), &s); err != nil {
		r.t.Fatalf("input %q: %v", k, err)
	}
	return s
}

func (r inputReader) int(k string) int64 {
	r.t.Helper()
	var n int64
	if err := json.Unmarshal(r.raw(k), &n); err != nil {
		r.t.Fatalf("input %q: %v", k, err)
	}
	return n
}

func (r inputReader) allUsed() {
	r.t.Helper()
	for k := range r.m {
		if !r.used[k] {
			r.t.Errorf("input %q is not used by the payload builder", k)
		}
	}
}

func mustSigner(t *testing.T, seedHex string) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(seedHex)
	if err != nil {
		t.Fatalf("signer: %v", err)
	}
	return s
}
