package node_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// ticketAnswer is a raw POST /tickets: status, Retry-After and the body.
type ticketAnswer struct {
	status int
	retry  string
	body   string
	json   map[string]any
}

func askTicket(t *testing.T, base string, seed byte) ticketAnswer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+s.PublicKeyHex()+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := ticketAnswer{status: resp.StatusCode, retry: resp.Header.Get("Retry-After"), body: string(b)}
	_ = json.Unmarshal(b, &a.json)
	return a
}

func (a ticketAnswer) code() string {
	e, _ := a.json["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// readyzBody is a node's /readyz: status and body.
func readyzBody(t *testing.T, h *nodetest.Harness) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(h.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// A provider pins the key POST /tickets names (D11) and refuses a welcome
// signed with another. A standby whose FUNDUQ_IDENTITY_KEY is not the one
// the leader published (design.md §Deployment, "One identity key") would
// name its own, and the provider then refuses the leader it reaches: so
// such a node issues no ticket — 503 identity_key_mismatch with
// Retry-After, naming no key — says so in an ERROR with both public keys,
// and /readyz names the mismatch. The leader, and a standby on its key,
// issue as before; and when a node on the other key takes over, the roles
// turn.
func TestStandbyWithAnotherIdentityKeyIssuesNoTickets(t *testing.T) {
	a := nodetest.Start(t, nil)
	logsB := &syncbuf.Buffer{}
	other := nodetest.SeedHex(0x77)
	b := a.PeerWith("node-b", func(c *configBroker) { c.IdentityKey = other },
		func(o *node.Options) { o.Logger = slog.New(slog.NewJSONHandler(logsB, nil)) })
	c := a.Peer("node-c") // a's key
	keyA, keyB := a.Node.FunduqKey(), b.Node.FunduqKey()
	if keyA == keyB {
		t.Fatal("the test needs two keys")
	}

	refused := func(who string, got ticketAnswer) {
		t.Helper()
		if got.status != http.StatusServiceUnavailable || got.code() != "identity_key_mismatch" || got.retry == "" {
			t.Fatalf("%s: POST /tickets %d Retry-After %q %s; want 503 identity_key_mismatch with Retry-After",
				who, got.status, got.retry, got.body)
		}
		if _, ok := got.json["ticket"]; ok || strings.Contains(got.body, keyA) || strings.Contains(got.body, keyB) ||
			len(got.json) != 1 {
			t.Fatalf("%s: the refusal says more than its code and message: %s", who, got.body)
		}
	}
	issued := func(who string, got ticketAnswer, key string) {
		t.Helper()
		if got.status != http.StatusCreated || got.json["funduqPublicKey"] != key {
			t.Fatalf("%s: POST /tickets %d %s; want 201 naming %s", who, got.status, got.body, key)
		}
	}

	refused("standby b on another key", askTicket(t, b.URL, 1))
	issued("leader a", askTicket(t, a.URL, 2), keyA)
	issued("standby c on the leader's key", askTicket(t, c.URL, 3), keyA)

	if code, body := readyzBody(t, b); code != http.StatusServiceUnavailable || body["identity_key"] != "mismatch" {
		t.Fatalf("b's /readyz %d %v; want 503 naming identity_key mismatch", code, body)
	}
	if code, body := readyzBody(t, c); body["identity_key"] != "ok" {
		t.Fatalf("c's /readyz %d %v; want identity_key ok", code, body)
	}
	var loud map[string]any
	for _, r := range logsB.Records() {
		if r["level"] == "ERROR" && strings.Contains(r["msg"].(string), "FUNDUQ_IDENTITY_KEY") {
			loud = r
		}
	}
	if loud == nil || loud["funduq_key"] != keyB || loud["published_funduq_key"] != keyA {
		t.Fatalf("b logged no ERROR naming its key %s and the published %s; logs:\n%s", keyB, keyA, logsB.String())
	}
	if strings.Contains(logsB.String(), other) {
		t.Fatal("a seed was logged")
	}

	// b takes over with its key and publishes it: now b issues, and a
	// standby on the old key refuses.
	c.Shutdown()
	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	issued("leader b", askTicket(t, b.URL, 4), keyB)
	d := b.PeerWith("node-d", func(c *configBroker) { c.IdentityKey = a.Cfg.IdentityKey }, nil)
	refused("standby d on the old key", askTicket(t, d.URL, 5))
	if code, body := readyzBody(t, d); code != http.StatusServiceUnavailable || body["identity_key"] != "mismatch" {
		t.Fatalf("d's /readyz %d %v; want 503 naming identity_key mismatch", code, body)
	}
}
