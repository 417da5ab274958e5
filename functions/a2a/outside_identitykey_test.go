package a2a_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// Seed 001 asks a deployment page to say of each duty whether core
// refuses without it or whether nothing will ever tell you. README's
// "FUNDUQ_IDENTITY_KEY ... the same on every node" is such a duty: a
// door holding another key than the broker would sign each bound run's
// dispatch hop — "what contradicts" a rebuilt chain (seed 001) — with a
// key no provider pinned (POST /tickets and welcome name the broker's).
// Core refuses: the leader publishes its public key, and such a door
// answers a task with an actor chain 503 identity_key_mismatch (A2A
// -32047), saying no key; the provider is offered nothing of it. Unbound
// tasks carry no hop and pass; a door with the broker's key is unchanged
// (design.md §Deployment, "One identity key").
func TestOutsideDoorWithAnotherIdentityKey(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	funduq := h.Node.FunduqKey() // the broker's key, which the welcome named
	const otherSeed = 0x77
	other := signer(t, otherSeed).PublicKeyHex()
	head := signer(t, 0xc1)
	doorWith := func(seed string) *client {
		t.Helper()
		deps, err := door.Connect(config.Door{Storage: h.Cfg.Storage,
			Identity: config.Identity{IdentityKey: seed, TokenSecret: h.Cfg.TokenSecret}},
			door.ConnectOptions{RedisPrefix: h.Prefix, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		return newClient(t, startDoorWith(t, deps, nil), p.Key, "echo", "")
	}
	send := func(c *client, messageID string, bound bool) rpcResp {
		t.Helper()
		meta := map[string]any{}
		if bound {
			meta["actorChain"] = chainOf(t, head)
		}
		body := c.body("message/send", map[string]any{"message": c.message(messageID, "hi", nil),
			"metadata": meta, "configuration": map[string]any{"blocking": false}})
		var hdr map[string]string
		if bound {
			hdr = map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(head, time.Now().Unix(), []byte(body))}
		}
		return c.rawCall(body, hdr)
	}

	wrong := doorWith(nodetest.SeedHex(otherSeed))
	r := send(wrong, "k-1", true)
	if r.Error == nil {
		t.Fatalf("a door holding another key admitted a task with an actor chain: %v", r.Result)
	}
	if r.Status != http.StatusServiceUnavailable || r.Error.Code != a2a.CodeMisconfigured ||
		r.Error.Data["reason"] != door.CodeIdentityKeyMismatch {
		t.Fatalf("refusal %d %d %v %q, want 503 %d reason %s", r.Status, r.Error.Code, r.Error.Data, r.Error.Message,
			a2a.CodeMisconfigured, door.CodeIdentityKeyMismatch)
	}
	if msg := r.Error.Message; strings.Contains(msg, funduq) || strings.Contains(msg, other) || strings.Contains(msg, "7777") {
		t.Fatalf("the refusal names key material: %q", msg)
	}
	// The same door's unbound task carries no hop and is offered; it is
	// the provider's first offer, so nothing was offered before it.
	r = send(wrong, "k-2", false)
	if r.Error != nil {
		t.Fatalf("an unbound task through the same door: %d %s", r.Error.Code, r.Error.Message)
	}
	if f := p.Offer(); f.RunID != r.Result["id"] {
		t.Fatalf("the provider was offered %s before the unbound task %v", f.RunID, r.Result["id"])
	}

	// With the broker's key: admitted, and the hop is funduq's.
	r = send(doorWith(h.Cfg.IdentityKey), "k-3", true)
	if r.Error != nil {
		t.Fatalf("a door with the broker's key refused: %d %s", r.Error.Code, r.Error.Message)
	}
	f := p.Offer()
	if f.RunID != r.Result["id"] {
		t.Fatalf("offered %s, want %v", f.RunID, r.Result["id"])
	}
	if got := offeredPresenter(t, f); got != funduq {
		t.Fatalf("the provider was offered a run whose dispatch hop is signed by %s, not funduq's key %s", got, funduq)
	}
}

// offeredPresenter is the key that signed the last hop of a run frame's
// actor chain: funduq's dispatch hop.
func offeredPresenter(t *testing.T, f wire.RunFrame) string {
	t.Helper()
	var in struct {
		ForwardedProps struct {
			Funduq struct {
				ActorChain []string `json:"actorChain"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil || in.ForwardedProps.Funduq.ActorChain == nil {
		t.Fatalf("run input without an actor chain (%v): %s", err, f.RunInput)
	}
	ch, err := identity.VerifyChain(in.ForwardedProps.Funduq.ActorChain)
	if err != nil {
		t.Fatalf("offered chain does not verify: %v", err)
	}
	return ch.Presenter()
}
