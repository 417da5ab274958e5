// Package kyok is the KYOK ("keep your own key") contract shared by the
// caller doors, the KYOK door (functions/kyok) and the broker's relay
// (broker-node/kyokrelay): the caller's opt-in, the sealed per-run binding,
// the door↔leader messages over Redis and a few JSON helpers.
//
// # The caller doors' contract (AG-UI, A2A)
//
// A caller opts one run in with a declaration in its request-level bag (AG-UI:
// the run input's forwardedProps; A2A: the request's metadata):
//
//	{"kyok": {"llmProvider": {"providerKey": "<64 hex>", "name": "<model>"}, "context": <any, optional>}}
//
// A door starting a run does, in this order:
//
//  1. opt, ok, err := kyok.ParseOptIn(bag). err only when bag is not JSON at
//     all; anything malformed under "kyok" is simply no opt-in (ok false).
//  2. When ok: store.LLMOfferingExists(ctx, opt.LLMProvider.ProviderKey,
//     opt.LLMProvider.Name) must be true, else refuse the request
//     (llm_provider_not_found). Whether the offering is attached is NOT
//     checked here.
//  3. bag = kyok.StripContext(bag) before the bag is stored or put in the
//     RunAgentInput: the caller's context is never stored readable nor
//     relayed to the agent.
//  4. Mint the run's token: identity.MintKyokToken(secret,
//     identity.NewKyokClaims(runID, agentProviderKey, agentName, now)) and
//     put it at forwardedProps.funduq.kyok = {"token": …} (D4).
//  5. sealed, _ := kyok.Seal(secret, opt.Binding()) and, after the run's row
//     is committed (or in the same transaction's aftermath, before the run
//     can be claimed), store.SetKyokBinding(ctx, runID,
//     opt.LLMProvider.ProviderKey, opt.LLMProvider.Name, sealed).
//
// secret is FUNDUQ_TOKEN_SECRET as bytes, the same on every door and node.
// The binding names an offering, never a connection; it covers one run
// only (nothing propagates to sub-runs) and the broker drops it when the run
// ends (store.Conclude drops it with the terminal move).
//
// The context is stored (design.md §KYOK),
// but only sealed (AES-256-GCM under a key derived from the token secret) in
// runs.kyok_binding, so a restart or a failover keeps KYOK runs working and
// no reader of the database or of the run's record sees it.
package kyok

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
)

// Ref names an LLM offering: the LLM provider's key and the model name.
type Ref struct {
	ProviderKey string `json:"providerKey"`
	Name        string `json:"name"`
}

// OptIn is a caller's KYOK declaration.
type OptIn struct {
	LLMProvider Ref
	// Context is the caller's opaque context (nil when absent).
	Context json.RawMessage
}

// Binding is what a run's sealed binding holds.
type Binding struct {
	LLMProviderKey string          `json:"llmProviderKey"`
	LLMName        string          `json:"llmName"`
	Context        json.RawMessage `json:"context,omitempty"`
}

// Ref is the offering the binding names.
func (b Binding) Ref() Ref { return Ref{ProviderKey: b.LLMProviderKey, Name: b.LLMName} }

// Binding is the opt-in as a run's binding.
func (o OptIn) Binding() Binding {
	return Binding{LLMProviderKey: o.LLMProvider.ProviderKey, LLMName: o.LLMProvider.Name, Context: o.Context}
}

// ParseOptIn reads bag's "kyok" declaration. Parsing never fails on the
// declaration: a "kyok" that is not an object, an llmProvider that is not an
// object, or a providerKey or name that is missing, empty or not a string is
// no opt-in (ok false). err is non-nil only when bag itself is not JSON.
// An empty bag or JSON null is no opt-in.
func ParseOptIn(bag json.RawMessage) (OptIn, bool, error) {
	bag = bytes.TrimSpace(bag)
	if len(bag) == 0 || string(bag) == "null" {
		return OptIn{}, false, nil
	}
	if !json.Valid(bag) {
		return OptIn{}, false, errors.New("kyok: the bag is not JSON")
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(bag, &top) != nil {
		return OptIn{}, false, nil // not an object: nothing declared
	}
	var decl map[string]json.RawMessage
	if json.Unmarshal(top["kyok"], &decl) != nil || decl == nil {
		return OptIn{}, false, nil
	}
	var ref map[string]json.RawMessage
	if json.Unmarshal(decl["llmProvider"], &ref) != nil || ref == nil {
		return OptIn{}, false, nil
	}
	key, ok1 := jsonString(ref["providerKey"])
	name, ok2 := jsonString(ref["name"])
	if !ok1 || !ok2 || key == "" || name == "" {
		return OptIn{}, false, nil
	}
	o := OptIn{LLMProvider: Ref{ProviderKey: key, Name: name}}
	if c, ok := decl["context"]; ok {
		o.Context = append(json.RawMessage(nil), c...)
	}
	return o, true, nil
}

func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// StripContext returns bag without kyok.context, every other byte of it
// (key order, spacing of the values) kept. A bag that is not a JSON object,
// or whose "kyok" is not an object, is returned unchanged.
func StripContext(bag json.RawMessage) json.RawMessage {
	top, err := Members(bag)
	if err != nil {
		return bag
	}
	changed := false
	for i, m := range top {
		if m.Key != "kyok" {
			continue
		}
		inner, err := Members(m.Value)
		if err != nil {
			continue
		}
		kept := inner[:0:0]
		for _, im := range inner {
			if im.Key == "context" {
				changed = true
				continue
			}
			kept = append(kept, im)
		}
		top[i].Value = BuildObject(kept)
	}
	if !changed {
		return bag
	}
	return BuildObject(top)
}

// bindingInfo is the HKDF info string for the binding key.
const bindingInfo = "funduq kyok binding"

// sealVersion prefixes every sealed binding, so the format can change.
const sealVersion = 1

func aead(secret []byte) (cipher.AEAD, error) {
	if len(secret) == 0 {
		return nil, errors.New("kyok: no token secret configured")
	}
	key, err := hkdf.Key(sha256.New, secret, nil, bindingInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("kyok: derive binding key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Seal encrypts b under a key derived from secret (FUNDUQ_TOKEN_SECRET):
// version byte 1, a random 12-byte nonce, then AES-256-GCM of b's JSON.
func Seal(secret []byte, b Binding) ([]byte, error) {
	if b.LLMProviderKey == "" || b.LLMName == "" {
		return nil, errors.New("kyok: a binding names an offering (provider key and name)")
	}
	if len(b.Context) > 0 && !json.Valid(b.Context) {
		return nil, errors.New("kyok: binding context is not JSON")
	}
	g, err := aead(secret)
	if err != nil {
		return nil, err
	}
	plain, err := json.Marshal(b)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+g.NonceSize(), 1+g.NonceSize()+len(plain)+g.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return g.Seal(out, out[1:], plain, []byte{sealVersion}), nil
}

// ErrSealed is matched by every refusal to open a sealed binding.
var ErrSealed = errors.New("kyok: sealed binding does not open")

// Open decrypts and checks a binding Seal made under the same secret.
func Open(secret []byte, sealed []byte) (Binding, error) {
	g, err := aead(secret)
	if err != nil {
		return Binding{}, err
	}
	if len(sealed) < 1+g.NonceSize()+g.Overhead() || sealed[0] != sealVersion {
		return Binding{}, fmt.Errorf("%w: unknown format", ErrSealed)
	}
	nonce := sealed[1 : 1+g.NonceSize()]
	plain, err := g.Open(nil, nonce, sealed[1+g.NonceSize():], []byte{sealVersion})
	if err != nil {
		return Binding{}, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	var b Binding
	if err := json.Unmarshal(plain, &b); err != nil || b.LLMProviderKey == "" || b.LLMName == "" {
		return Binding{}, fmt.Errorf("%w: content", ErrSealed)
	}
	return b, nil
}
