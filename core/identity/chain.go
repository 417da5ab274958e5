package identity

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// jwsHeader is the only header a hop may carry, byte for byte. Comparing its
// canonical base64url segment is equivalent to comparing the decoded bytes,
// because segments are decoded strictly (no non-canonical encodings).
const jwsHeader = `{"alg":"EdDSA","typ":"JWT"}`

var (
	b64url       = base64.RawURLEncoding.Strict()
	jwsHeaderSeg = base64.RawURLEncoding.EncodeToString([]byte(jwsHeader))
)

// Claim names, in the order they are rendered.
const (
	claimActor      = "actorPublicKey"
	claimPrevHash   = "prevHash"
	claimDispatched = "dispatchedTo"
)

// DispatchTarget names the agent a dispatch hop offered the run to.
type DispatchTarget struct {
	ProviderKey string // lowercase hex public key
	Name        string // agent name
}

// Hop is one verified (or freshly signed) link of an actor chain.
type Hop struct {
	Token        string          // the full compact JWS, as it travels
	ActorKey     string          // actorPublicKey: lowercase hex of the signer
	PrevHash     string          // sha256 hex of the previous token; "" means null (first hop)
	DispatchedTo *DispatchTarget // non-nil for a dispatch hop
}

// Chain is an actor chain, head first.
type Chain struct {
	Hops []Hop
}

// ChainSummary is the compact view of a chain that is stored and logged.
type ChainSummary struct {
	HeadKey      string `json:"headKey"`
	PresenterKey string `json:"presenterKey"`
	Hops         int    `json:"hops"`
}

// Len is the number of hops.
func (c Chain) Len() int { return len(c.Hops) }

// Head is the first hop's key: the authority of the responsibility segment.
// It is "" for an empty chain.
func (c Chain) Head() string {
	if len(c.Hops) == 0 {
		return ""
	}
	return c.Hops[0].ActorKey
}

// Presenter is the last hop's key: the party that must present the chain.
// It is "" for an empty chain.
func (c Chain) Presenter() string {
	if len(c.Hops) == 0 {
		return ""
	}
	return c.Hops[len(c.Hops)-1].ActorKey
}

// Tokens returns the hop tokens in order (a new slice), ready to relay.
func (c Chain) Tokens() []string {
	out := make([]string, len(c.Hops))
	for i, h := range c.Hops {
		out[i] = h.Token
	}
	return out
}

// ActorKeys returns the hop signers' keys in order (a new slice).
func (c Chain) ActorKeys() []string {
	out := make([]string, len(c.Hops))
	for i, h := range c.Hops {
		out[i] = h.ActorKey
	}
	return out
}

// Summary returns head, presenter and hop count.
func (c Chain) Summary() ChainSummary {
	return ChainSummary{HeadKey: c.Head(), PresenterKey: c.Presenter(), Hops: c.Len()}
}

// VerifyChain verifies an actor chain hop by hop: each token is a compact JWS
// with exactly the EdDSA header, claims with no unknown keys and an
// actorPublicKey, a signature under that key, and a prevHash that is null on
// the first hop and the sha256 hex of the previous full token afterwards (so a
// hop can be neither dropped, reordered nor moved to another chain). After a
// dispatch hop the next hop must be signed by the named providerKey, or by the
// dispatcher itself as another dispatch; a chain may end at a dispatch.
// Refusals are *ChainError values matching ErrInvalidChain.
func VerifyChain(tokens []string) (Chain, error) {
	if len(tokens) == 0 {
		return Chain{}, &ChainError{Hop: -1, Reason: "chain is empty"}
	}
	hops := make([]Hop, 0, len(tokens))
	for i, tok := range tokens {
		h, err := parseHop(tok)
		if err != nil {
			return Chain{}, withHop(err, i)
		}
		var prev *Hop
		if i > 0 {
			prev = &hops[i-1]
		}
		if err := checkLink(prev, h); err != nil {
			return Chain{}, withHop(err, i)
		}
		hops = append(hops, h)
	}
	return Chain{Hops: hops}, nil
}

func withHop(err error, i int) error {
	var ce *ChainError
	if errors.As(err, &ce) {
		ce.Hop = i
		return ce
	}
	return &ChainError{Hop: i, Reason: "refused", Err: err}
}

func hopErr(reason string, cause error) *ChainError {
	return &ChainError{Hop: -1, Reason: reason, Err: cause}
}

// parseHop checks one token in isolation: shape, header, claims and signature.
func parseHop(tok string) (Hop, error) {
	headerSeg, rest, ok1 := strings.Cut(tok, ".")
	claimsSeg, sigSeg, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || strings.Contains(sigSeg, ".") {
		return Hop{}, hopErr("not a compact JWS (want three dot-separated segments)", nil)
	}
	if headerSeg != jwsHeaderSeg {
		return Hop{}, hopErr("header is not exactly "+jwsHeader, nil)
	}
	rawClaims, err := b64url.DecodeString(claimsSeg)
	if err != nil {
		return Hop{}, hopErr("claims segment is not base64url without padding", err)
	}
	h, err := parseClaims(rawClaims)
	if err != nil {
		return Hop{}, err
	}
	h.Token = tok
	sig, err := b64url.DecodeString(sigSeg)
	if err != nil {
		return Hop{}, hopErr("signature segment is not base64url without padding", err)
	}
	if len(sig) != ed25519.SignatureSize {
		return Hop{}, hopErr(fmt.Sprintf("signature is %d bytes, want %d", len(sig), ed25519.SignatureSize), ErrBadSignature)
	}
	pub, _ := ParsePublicKey(h.ActorKey) // cannot fail: validated by parseClaims
	if smallOrder(pub) || !ed25519.Verify(pub, []byte(headerSeg+"."+claimsSeg), sig) {
		return Hop{}, hopErr("signature does not verify under actorPublicKey", ErrBadSignature)
	}
	return h, nil
}

// parseClaims decodes hop claims strictly. A missing or null prevHash reads as
// null; an empty-string prevHash is refused so that Hop.PrevHash == "" can mean null.
func parseClaims(raw []byte) (Hop, error) {
	m, err := jsonObject(raw, claimActor, claimPrevHash, claimDispatched)
	if err != nil {
		return Hop{}, hopErr("bad claims", err)
	}
	var h Hop
	actorRaw, ok := m[claimActor]
	if !ok {
		return Hop{}, hopErr("claims lack actorPublicKey", nil)
	}
	actor, ok := jsonString(actorRaw)
	if !ok {
		return Hop{}, hopErr("actorPublicKey is not a string", nil)
	}
	if _, err := ParsePublicKey(actor); err != nil {
		return Hop{}, hopErr("bad actorPublicKey", err)
	}
	h.ActorKey = actor

	if ph, ok := m[claimPrevHash]; ok && !isJSONNull(ph) {
		s, ok := jsonString(ph)
		if !ok || s == "" {
			return Hop{}, hopErr("prevHash is neither null nor a non-empty string", nil)
		}
		h.PrevHash = s
	}

	if dt, ok := m[claimDispatched]; ok && !isJSONNull(dt) {
		d, err := parseDispatchTarget(dt)
		if err != nil {
			return Hop{}, err
		}
		h.DispatchedTo = d
	}
	return h, nil
}

func parseDispatchTarget(raw []byte) (*DispatchTarget, error) {
	m, err := jsonObject(raw, "providerKey", "name")
	if err != nil {
		return nil, hopErr("bad dispatchedTo", err)
	}
	pk, ok := jsonString(m["providerKey"])
	if !ok {
		return nil, hopErr("dispatchedTo.providerKey is missing or not a string", nil)
	}
	if _, err := ParsePublicKey(pk); err != nil {
		return nil, hopErr("bad dispatchedTo.providerKey", err)
	}
	name, ok := jsonString(m["name"])
	if !ok || name == "" {
		return nil, hopErr("dispatchedTo.name is missing, empty or not a string", nil)
	}
	return &DispatchTarget{ProviderKey: pk, Name: name}, nil
}

// checkLink applies the rules that relate hop h to its predecessor.
func checkLink(prev *Hop, h Hop) error {
	if prev == nil {
		if h.PrevHash != "" {
			return hopErr("first hop must have a null prevHash", nil)
		}
		return nil
	}
	if h.PrevHash == "" {
		return hopErr("prevHash is null but this is not the first hop", nil)
	}
	if want := SHA256Hex([]byte(prev.Token)); h.PrevHash != want {
		return hopErr("prevHash does not match the previous hop's token", nil)
	}
	if d := prev.DispatchedTo; d != nil {
		switch {
		case h.ActorKey == d.ProviderKey:
		case h.ActorKey == prev.ActorKey && h.DispatchedTo != nil:
			// the dispatcher re-dispatching (e.g. funduq re-offering) is allowed
		default:
			return hopErr(fmt.Sprintf("follows a dispatch to %s but is signed by %s without re-dispatching",
				d.ProviderKey, h.ActorKey), nil)
		}
	}
	return nil
}

// appendClaims renders claims compactly, in the fixed key order, with
// Python-compatible string escaping, so hops reproduce byte for byte.
func appendClaims(dst []byte, h Hop) []byte {
	dst = append(dst, `{"actorPublicKey":`...)
	dst = appendPyJSONString(dst, h.ActorKey)
	dst = append(dst, `,"prevHash":`...)
	if h.PrevHash == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendPyJSONString(dst, h.PrevHash)
	}
	if d := h.DispatchedTo; d != nil {
		dst = append(dst, `,"dispatchedTo":{"providerKey":`...)
		dst = appendPyJSONString(dst, d.ProviderKey)
		dst = append(dst, `,"name":`...)
		dst = appendPyJSONString(dst, d.Name)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// signCompact returns headerSeg "." claimsSeg "." b64url(sig over the first two).
func signCompact(s *Signer, headerSeg, claimsSeg string) string {
	input := headerSeg + "." + claimsSeg
	return input + "." + base64.RawURLEncoding.EncodeToString(s.signRaw([]byte(input)))
}

// SignHop signs the hop that follows prev (nil for a chain's first hop),
// optionally as a dispatch to dispatched. It refuses (ErrInvalidChain) to sign
// a hop that VerifyChain would reject after prev, and refuses malformed
// dispatch targets (bad key: ErrBadKey; empty or non-UTF-8 name: ErrInvalidChain).
func SignHop(s *Signer, prev *Hop, dispatched *DispatchTarget) (Hop, error) {
	if s == nil {
		return Hop{}, errors.New("identity: sign hop: nil signer")
	}
	h := Hop{ActorKey: s.PublicKeyHex()}
	if dispatched != nil {
		if _, err := ParsePublicKey(dispatched.ProviderKey); err != nil {
			return Hop{}, fmt.Errorf("identity: sign hop: dispatch target: %w", err)
		}
		if dispatched.Name == "" || !utf8.ValidString(dispatched.Name) {
			return Hop{}, fmt.Errorf("identity: sign hop: %w: dispatch target name must be non-empty UTF-8", ErrInvalidChain)
		}
		d := *dispatched
		h.DispatchedTo = &d
	}
	if prev != nil {
		if prev.Token == "" {
			return Hop{}, fmt.Errorf("identity: sign hop: %w: previous hop has no token", ErrInvalidChain)
		}
		h.PrevHash = SHA256Hex([]byte(prev.Token))
		if err := checkLink(prev, h); err != nil {
			return Hop{}, fmt.Errorf("identity: sign hop: %w", err)
		}
	}
	h.Token = signCompact(s, jwsHeaderSeg, base64.RawURLEncoding.EncodeToString(appendClaims(nil, h)))
	return h, nil
}

// AppendDispatchHop returns a copy of c (a chain from VerifyChain) extended
// with funduq's dispatch hop, signed by funduq's identity and naming the exact
// (providerKey, agentName) the run is offered to. c is not modified.
func AppendDispatchHop(c Chain, funduq *Signer, providerKey, agentName string) (Chain, error) {
	if c.Len() == 0 {
		return Chain{}, fmt.Errorf("identity: append dispatch hop: %w", &ChainError{Hop: -1, Reason: "chain is empty"})
	}
	last := c.Hops[c.Len()-1]
	h, err := SignHop(funduq, &last, &DispatchTarget{ProviderKey: providerKey, Name: agentName})
	if err != nil {
		return Chain{}, fmt.Errorf("identity: append dispatch hop: %w", err)
	}
	hops := make([]Hop, 0, c.Len()+1)
	hops = append(append(hops, c.Hops...), h)
	return Chain{Hops: hops}, nil
}
