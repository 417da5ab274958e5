package node_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// codedAnswer sends frame and returns funduq's answer with the error
// frame's members as sent, so a member a wire.Error does not have is seen.
func (s *stranger) codedAnswer(frame []byte) (typ string, members map[string]any) {
	s.t.Helper()
	s.send(frame)
	typ, data := s.next()
	if err := json.Unmarshal(data, &members); err != nil {
		s.t.Fatalf("answer %s: %v", data, err)
	}
	return typ, members
}

// The error answering a register says in its code whether retrying can
// help (design.md §The provider wire, "Refusal codes"): register_refused
// for a register refused past a limit, one that does not validate, or one
// whose key's fingerprint another key holds — the same register is
// refused again however often it is sent — and retry_later at the served
// cap, which frees as other providers leave. Before, the frame had no code
// and a provider told them apart only by the text, which left the
// fingerprint refusal retried for ever by our SDK. Errors answering
// anything else carry no code.
func TestRawRegisterRefusalsCarryACode(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) {
		c.MaxAgentsPerRegister = 2
		c.MaxServedAgents = 2
		c.MaxFrame, c.MaxEventBytes, c.MaxAgentDescriptionBytes = 32<<10, 16<<10, 64<<10
	})
	want := func(s *stranger, what string, frame []byte, code, naming string) {
		t.Helper()
		typ, m := s.codedAnswer(frame)
		msg, _ := m["message"].(string)
		if typ != wire.TypeError || !strings.Contains(msg, naming) {
			t.Fatalf("%s: answered %q %q; want an error naming %q", what, typ, wsClip(msg), naming)
		}
		if got, ok := m["code"]; code == "" && ok {
			t.Errorf("%s: code %v, want none", what, got)
		} else if code != "" && got != code {
			t.Errorf("%s: code %v, want %q", what, got, code)
		}
	}
	one := func(name string) []byte { return registerFrame(map[string]any{"name": name}) }

	s := admit(t, h, 0xd1)
	want(s, "three agents past FUNDUQ_MAX_AGENTS_PER_REGISTER", registerFrame(
		map[string]any{"name": "a"}, map[string]any{"name": "b"}, map[string]any{"name": "c"}),
		"register_refused", "FUNDUQ_MAX_AGENTS_PER_REGISTER")
	want(s, "a name listed twice", registerFrame(map[string]any{"name": "a"}, map[string]any{"name": "a"}),
		"register_refused", "listed twice")
	want(s, "a register with a member funduq does not know", []byte(`{"type":"register","agents":[{"name":"a"}],"bogus":1}`),
		"register_refused", "register does not validate")
	want(s, "a register holding a repeated key", []byte(`{"type":"register","agents":[{"name":"a","name":"b"}]}`),
		"register_refused", "")
	want(s, "a register frame over FUNDUQ_MAX_FRAME_BYTES", registerFrame(map[string]any{"name": "a", "description": strings.Repeat("d", 40<<10)}),
		"register_refused", "FUNDUQ_MAX_FRAME_BYTES")

	// Another key holds this key's fingerprint: no register of this key
	// can ever be recorded.
	held := doorKey(t, 0xd2)
	if _, err := h.DB().Exec(t.Context(), `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)`,
		strings.Repeat("0", 63)+"1", identity.Fingerprint(held.PublicKey())); err != nil {
		t.Fatal(err)
	}
	want(admit(t, h, 0xd2), "a key whose fingerprint another key holds", one("a"),
		"register_refused", "fingerprint is already held")

	// The served cap is a refusal of the moment.
	if typ, m := admit(t, h, 0xd3).codedAnswer(registerFrame(map[string]any{"name": "x"}, map[string]any{"name": "y"})); typ != wire.TypeRegistered {
		t.Fatalf("a register within the cap: %q %v", typ, m)
	}
	late := admit(t, h, 0xd4)
	want(late, "a register past FUNDUQ_MAX_SERVED_AGENTS", one("z"), "retry_later", "FUNDUQ_MAX_SERVED_AGENTS")

	// A refusal of anything but a register carries no code.
	want(late, "a deleteAgent of a name never registered", []byte(`{"type":"deleteAgent","name":"nobody"}`), "", "nobody")
	want(late, "an ack of an unknown run", []byte(`{"type":"ack","runId":"r-unknown","accepted":true}`), "", "")
}
