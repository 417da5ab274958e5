package node_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// What a stranger holding only a key it minted may make funduq keep
// (design.md §The provider wire, "Admission"): a raw gorilla/websocket
// client, not the SDK, speaking wire v4 by hand.

// stranger is a raw link past welcome.
type stranger struct {
	t   *testing.T
	ws  *websocket.Conn
	pub string // its key
	n   int
}

// admit mints a ticket for seed's key and opens a link with it, returning
// once welcomed.
func admit(t *testing.T, h *nodetest.Harness, seed byte) *stranger {
	t.Helper()
	k := doorKey(t, seed)
	tk := ticketFor(t, h, k.PublicKeyHex())
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Cleanup(func() { _ = ws.Close() })
	if err := ws.WriteJSON(rawHello(h, k.PublicKeyHex(), tk, nonceOf(fmt.Sprint("admit", seed)), k)); err != nil {
		t.Fatal(err)
	}
	s := &stranger{t: t, ws: ws, pub: k.PublicKeyHex()}
	if typ, _ := s.next(); typ != wire.TypeWelcome {
		t.Fatalf("hello answered %q", typ)
	}
	return s
}

// next reads the next frame; a close from funduq fails t.
func (s *stranger) next() (string, []byte) {
	s.t.Helper()
	_ = s.ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, data, err := s.ws.ReadMessage()
	if err != nil {
		s.t.Fatalf("reading the link: %v", err)
	}
	typ, _ := wire.PeekType(data)
	return typ, data
}

// send writes one text frame.
func (s *stranger) send(frame []byte) {
	s.t.Helper()
	if err := s.ws.WriteMessage(websocket.TextMessage, frame); err != nil {
		s.t.Fatal(err)
	}
}

// answered sends frame and returns funduq's answer: the next frame.
func (s *stranger) answered(frame []byte) (string, wire.Error) {
	s.t.Helper()
	s.send(frame)
	typ, data := s.next()
	var e wire.Error
	if typ == wire.TypeError {
		_ = json.Unmarshal(data, &e)
	}
	return typ, e
}

// open proves the link is open and read: a deleteAgent of a name it never
// registered is answered on the read loop with an error naming it.
func (s *stranger) open() {
	s.t.Helper()
	s.n++
	name := fmt.Sprintf("barrier-%d", s.n)
	if typ, e := s.answered([]byte(`{"type":"deleteAgent","name":"` + name + `"}`)); typ != wire.TypeError || e.Name != name {
		s.t.Fatalf("barrier answered %q %+v", typ, e)
	}
}

// closed waits for funduq to close the link and returns its close.
func (s *stranger) closed() *websocket.CloseError {
	s.t.Helper()
	_ = s.ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, data, err := s.ws.ReadMessage()
		if err == nil {
			s.t.Logf("frame before the close: %s", data)
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			s.t.Fatalf("the link ended with %v, not a close frame", err)
		}
		return ce
	}
}

func registerFrame(agents ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"type": "register", "agents": agents})
	return b
}

func agentsNamed(n int, each func(i int) map[string]any) []map[string]any {
	out := make([]map[string]any, n)
	for i := range out {
		out[i] = each(i)
	}
	return out
}

// One register is bounded by the defaults (FUNDUQ_MAX_AGENTS_PER_REGISTER,
// FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES, FUNDUQ_MAX_AGENT_CARD_BYTES,
// FUNDUQ_MAX_REGISTER_BYTES): 5 000 names, a 4 MiB description, a card or
// metadata of 100 KiB, or 200 agents of 15 KiB each were answered
// "registered" and kept, listed by GET /agents to every caller. Each is
// refused with an error naming its limit, and nothing is registered; an
// honest provider's register (tens of agents, a few KB each) is answered
// "registered".
func TestRegisterIsBounded(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := admit(t, h, 0xa1)
	big := func(n int) string { return strings.Repeat("x", n) }
	obj := func(n int) map[string]any { return map[string]any{"notes": big(n)} }
	for _, tc := range []struct {
		what   string
		frame  []byte
		naming string
	}{
		{"5000 agents", registerFrame(agentsNamed(5000, func(i int) map[string]any { return map[string]any{"name": fmt.Sprint("a", i)} })...),
			"FUNDUQ_MAX_AGENTS_PER_REGISTER"},
		{"a 4 MiB description", registerFrame(map[string]any{"name": "a", "description": big(4 << 20)}),
			"FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES"},
		{"a 100 KiB agentCardExtra", registerFrame(map[string]any{"name": "a", "agentCardExtra": obj(100 << 10)}),
			"FUNDUQ_MAX_AGENT_CARD_BYTES"},
		{"a 100 KiB metadata", registerFrame(map[string]any{"name": "a", "metadata": obj(100 << 10)}),
			"FUNDUQ_MAX_AGENT_CARD_BYTES"},
		{"200 agents of 15 KiB", registerFrame(agentsNamed(200, func(i int) map[string]any {
			return map[string]any{"name": fmt.Sprint("a", i), "description": big(15 << 10)}
		})...), "FUNDUQ_MAX_REGISTER_BYTES"},
		{"a 4 KiB providerName", func() []byte {
			b, _ := json.Marshal(map[string]any{"type": "register", "agents": []any{map[string]any{"name": "a"}}, "providerName": big(4 << 10)})
			return b
		}(), "providerName"},
	} {
		typ, e := s.answered(tc.frame)
		if typ != wire.TypeError || !strings.Contains(e.Message, tc.naming) {
			t.Errorf("%s: answered %q %q; want an error naming %s", tc.what, typ, wsClip(e.Message), tc.naming)
		}
	}
	if l := listing(t, h); len(l) != 0 {
		t.Fatalf("registered by refused registers: %d agents", len(l))
	}
	honest := registerFrame(agentsNamed(40, func(i int) map[string]any {
		return map[string]any{"name": fmt.Sprint("agent-", i), "description": big(3 << 10),
			"agentCardExtra": map[string]any{"skills": []any{map[string]any{"id": "s", "name": "s", "description": big(2 << 10)}}},
			"metadata":       obj(1 << 10)}
	})...)
	if typ, e := s.answered(honest); typ != wire.TypeRegistered {
		t.Fatalf("an honest register: %q %q", typ, e.Message)
	}
	if l := listing(t, h); len(l) != 40 {
		t.Fatalf("listed %d agents, want 40", len(l))
	}
}

func wsClip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// A link that completes the handshake and never registers was held for as
// long as it answered pings: a socket and goroutines of the leader per
// stranger's link, for ever. Past FUNDUQ_REGISTER_DEADLINE (30 s by
// default) with no register answered "registered" it is closed 1008 saying
// why; a link that registered in time is not, nor is one before the
// deadline.
func TestLinkThatNeverRegistersIsClosed(t *testing.T) {
	h := nodetest.Start(t, nil)
	idle := admit(t, h, 0xa2)
	honest := admit(t, h, 0xa3)
	refused := admit(t, h, 0xa4)
	// Each link's read loop has begun: its deadline is running.
	idle.open()
	if typ, _ := honest.answered(registerFrame(map[string]any{"name": "echo"})); typ != wire.TypeRegistered {
		t.Fatalf("register answered %q", typ)
	}
	// A refused register does not count as one.
	if typ, _ := refused.answered(registerFrame()); typ != wire.TypeError {
		t.Fatalf("an empty register answered %q", typ)
	}

	h.Advance(29 * time.Second)
	idle.open() // not yet

	h.Advance(time.Second)
	for _, s := range []*stranger{idle, refused} {
		ce := s.closed()
		if ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "register") || !strings.Contains(ce.Text, "30s") {
			t.Fatalf("closed %d %q; want 1008 saying no register came within 30s", ce.Code, ce.Text)
		}
	}
	// The registered link, whose deadline ended with its register, is
	// still read and still serves.
	honest.open()
	if l := listing(t, h); len(l) != 1 || !l[honest.pub[:4]+"/echo"].Online {
		t.Fatalf("listing %+v", l)
	}
}

// A register exactly at each bound is taken, and one byte past it is
// refused naming the size in bytes, with text of two-byte characters (a
// bound in bytes must not read as one in characters either way); a
// refused register lists nothing.
func TestRegisterBoundsAreExactInBytes(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := admit(t, h, 0xa5)
	e2 := func(n int) string { return strings.Repeat("é", n) } // 2 bytes each
	withName := func(name string, agent map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"type": "register", "agents": []any{agent}, "providerName": name})
		return b
	}
	for _, tc := range []struct {
		what   string
		frame  []byte
		naming string
	}{
		{"a description of 16385 bytes", registerFrame(map[string]any{"name": "a", "description": e2(8192) + "x"}), "is 16385 bytes"},
		{"a providerName of 257 bytes", withName(e2(128)+"x", map[string]any{"name": "a"}), "is 257 bytes"},
	} {
		typ, e := s.answered(tc.frame)
		if typ != wire.TypeError || !strings.Contains(e.Message, tc.naming) {
			t.Errorf("%s: answered %q %q; want an error saying it %s", tc.what, typ, wsClip(e.Message), tc.naming)
		}
	}
	if l := listing(t, h); len(l) != 0 {
		t.Fatalf("registered by refused registers: %d agents", len(l))
	}
	if typ, e := s.answered(withName(e2(128), map[string]any{"name": "a", "description": e2(8192)})); typ != wire.TypeRegistered {
		t.Fatalf("a register exactly at the bounds: %q %q", typ, wsClip(e.Message))
	}
	if l := listing(t, h); len(l) != 1 {
		t.Fatalf("listed %d agents, want 1", len(l))
	}
}
