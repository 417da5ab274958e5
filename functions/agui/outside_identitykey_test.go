package agui_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// An AG-UI door whose FUNDUQ_IDENTITY_KEY is not the broker's refuses a
// run with an actor chain 503 identity_key_mismatch, naming no key, and
// writes nothing: the provider's first offer is the unbound run the same
// door admits next. While no leader has published a key (one of an older
// release), a door with the broker's key admits bound runs as before
// (design.md §Deployment, "One identity key").
func TestOutsideAGUIDoorWithAnotherIdentityKey(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	head := signer(t, 0xc1)
	doorWith := func(seed string) string {
		t.Helper()
		cfg := doorCfg(h)
		cfg.IdentityKey = seed
		deps, err := door.Connect(cfg, door.ConnectOptions{RedisPrefix: h.Prefix, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		return startDoorWith(t, deps, nil).URL + "/agui/" + p.Key + "/echo"
	}

	wrong := doorWith(nodetest.SeedHex(0x77))
	runs := runCount(t, h)
	body := boundBody("t-1", "r-1", chainOf(t, head), "")
	code, hdr, got := jsonCall(t, "POST", wrong, body, presenterHdr(head, body))
	e, _ := got["error"].(map[string]any)
	if code != http.StatusServiceUnavailable || e["code"] != door.CodeIdentityKeyMismatch {
		t.Fatalf("a door holding another key answered %d %v, want 503 %s", code, got, door.CodeIdentityKeyMismatch)
	}
	if msg, _ := e["message"].(string); strings.Contains(msg, h.Node.FunduqKey()) || strings.Contains(msg, signer(t, 0x77).PublicKeyHex()) {
		t.Fatalf("the refusal names key material: %q", msg)
	}
	if hdr.Get("Retry-After") != "" {
		t.Fatalf("Retry-After %q: retrying does not mend a misconfiguration", hdr.Get("Retry-After"))
	}
	if n := runCount(t, h); n != runs {
		t.Fatalf("%d runs written by the refused request", n-runs)
	}
	s := openStream(t, "POST", wrong,
		`{"threadId":"t-2","runId":"r-2","messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{}}`, nil)
	f := p.Offer()
	if f.ThreadID == nil || f.RunID == "" {
		t.Fatalf("offer %+v", f)
	}
	if strings.Contains(string(f.RunInput), "actorChain") {
		t.Fatalf("the provider's first offer carries an actor chain: %s", f.RunInput)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()

	// A leader of an older release publishes nothing: nothing to compare.
	if _, err := h.DB().Exec(t.Context(), `UPDATE broker_leader SET funduq_key = ''`); err != nil {
		t.Fatal(err)
	}
	body = boundBody("t-3", "r-3", chainOf(t, head), "")
	s = openStream(t, "POST", doorWith(h.Cfg.IdentityKey), body, presenterHdr(head, body))
	f = p.Offer()
	if !strings.Contains(string(f.RunInput), "actorChain") {
		t.Fatalf("the bound run's offer carries no actor chain: %s", f.RunInput)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
}
