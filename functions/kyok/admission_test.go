package kyok_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/wire"
)

// The KYOK link admits what the agent link does (design.md §The provider
// wire, "Admission"): a stranger's key costs nothing, so one register is
// bounded — FUNDUQ_MAX_AGENTS_PER_REGISTER models,
// FUNDUQ_MAX_AGENT_CARD_BYTES of metadata — and refused past it naming
// the setting, with nothing registered; 5 000 models or a 4 MiB metadata
// were answered "registered".
func TestKyokRegisterIsBounded(t *testing.T) {
	e := newEnv(t, 0)
	l := e.attachLLM(0x51)
	models := make([]string, 5000)
	for i := range models {
		models[i] = fmt.Sprint("m", i)
	}
	meta, _ := json.Marshal(map[string]string{"notes": strings.Repeat("x", 4<<20)})
	for _, tc := range []struct {
		what   string
		frame  wire.RegisterModels
		naming string
	}{
		{"5000 models", wire.RegisterModels{Type: wire.TypeRegister, Models: models}, "FUNDUQ_MAX_AGENTS_PER_REGISTER"},
		{"a 4 MiB metadata", wire.RegisterModels{Type: wire.TypeRegister, Models: []string{"gpt-4"}, Metadata: meta}, "FUNDUQ_MAX_AGENT_CARD_BYTES"},
	} {
		l.send(tc.frame)
		got := l.next()
		var f wire.KyokError
		_ = json.Unmarshal(got, &f)
		if typ, _ := wire.PeekType(got); typ != wire.TypeError || !strings.Contains(f.Message, tc.naming) {
			t.Errorf("%s: answered %.200s; want an error naming %s", tc.what, got, tc.naming)
		}
	}
	for _, name := range []string{"m0", "gpt-4"} {
		if ok, _ := e.H.Store.LLMOfferingExists(context.Background(), l.Key, name); ok {
			t.Errorf("offering %s registered by a refused register", name)
		}
	}
	l.send(wire.RegisterModels{Type: wire.TypeRegister, Models: []string{"gpt-4", "claude"}})
	l.expect(wire.TypeRegistered, nil)
}

// A KYOK link with no register answered "registered" within
// FUNDUQ_REGISTER_DEADLINE (30 s by default) of welcome is closed 1008
// saying why, where it was held for as long as it answered pings; a link
// that registered in time is not.
func TestKyokLinkThatNeverRegistersIsClosed(t *testing.T) {
	e := newEnv(t, 0)
	idle := e.attachLLM(0x52)
	honest := e.attachLLM(0x53, "gpt-4")
	// The idle link's read loop has begun, so its deadline runs.
	idle.send(wire.DeleteModel{Type: wire.TypeDeleteModel, Name: "never-registered"})
	idle.expect(wire.TypeError, nil)

	e.H.Advance(29 * time.Second)
	idle.send(wire.DeleteModel{Type: wire.TypeDeleteModel, Name: "never-registered"})
	idle.expect(wire.TypeError, nil) // not yet

	e.H.Advance(time.Second)
	select {
	case <-idle.closed:
	case <-time.After(guard):
		t.Fatal("the link that never registered is still open")
	}
	var ce *websocket.CloseError
	if !errors.As(idle.closeErr, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "register") {
		t.Fatalf("closed with %v; want 1008 saying no register came in time", idle.closeErr)
	}
	// The registered link is still read.
	honest.send(wire.RegisterModels{Type: wire.TypeRegister, Models: []string{"gpt-4", "claude"}})
	honest.expect(wire.TypeRegistered, nil)
}

// next returns the next frame other than a completionRequest.
func (l *llm) next() []byte {
	l.t.Helper()
	select {
	case f := <-l.other:
		return f
	case <-time.After(guard):
		l.t.Fatal("no frame arrived")
	}
	return nil
}
