package kyok_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/kyok"
)

// An LLM provider restarts while a completion is in flight: its old link
// closes, and it re-attaches under the same key and registers again while
// the old link's teardown is still at work (here held, deterministically,
// on the database row its failed completion is counted in — a slow
// database). The teardown must not then mark unserved, in the durable
// roster, the offering the new link serves: doors read that roster, and
// would answer every call 503 llm_not_attached while the provider is
// attached (design.md §KYOK: "a link serving the binding").
func TestOutsideReattachDuringTeardownStaysServed(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()
	old := e.rawLLM(0x58, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: old.key, Name: "gpt-4"}, "")
	pool := e.H.Store.Pool()

	// The barrier: hold the provider's counter row.
	if _, err := pool.Exec(ctx, `INSERT INTO provider_quality (provider_key) VALUES ($1) ON CONFLICT DO NOTHING`, old.key); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM provider_quality WHERE provider_key = $1 FOR UPDATE`, old.key); err != nil {
		t.Fatal(err)
	}

	res := e.asyncCall(a, token, plainBody)
	old.requestID()
	// The old link says goodbye mid-completion.
	if err := old.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "restarting")); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, res); r.code != 502 {
		t.Fatalf("in-flight call: %d %s", r.code, r.body)
	}
	eventually(t, "the teardown waits on the counter row", func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE '%provider_quality%'`).Scan(&n)
		return n > 0
	})

	// The provider is back, under the same key, before the teardown ends.
	repl := e.rawLLM(0x58, "gpt-4")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The teardown has ended once the node closes the old socket.
	<-old.closed
	_ = old.ws.UnderlyingConn().SetReadDeadline(time.Now().Add(guard))
	for buf := make([]byte, 512); ; {
		if _, err := old.ws.UnderlyingConn().Read(buf); err != nil {
			if strings.Contains(err.Error(), "timeout") {
				t.Fatal("the old link's teardown did not end")
			}
			break
		}
	}

	if ok, _ := e.H.Store.LLMOfferingServed(ctx, repl.key, "gpt-4"); !ok {
		t.Error("the durable roster says gpt-4 is unserved while the new link serves it")
	}
	res = e.asyncCall(a, token, plainBody)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case m := <-repl.frames:
			if id, _ := m["requestId"].(string); m["type"] == "completionRequest" {
				_ = repl.ws.WriteMessage(websocket.TextMessage, []byte(rawChunk(id, chunkData("back"))))
				_ = repl.ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"done","requestId":"`+id+`"}`))
			}
		case <-time.After(guard):
		}
	}()
	r := wait(t, res)
	if r.code != 200 || !strings.Contains(string(r.body), `"content":"back"`) {
		t.Errorf("a call after the provider came back: %d %s", r.code, r.body)
	}
	// Unblock the answering goroutine if the call never reached the link.
	if r.code != 200 {
		repl.frames <- map[string]any{}
	}
	<-done
}
