package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/broker-node/wsconn"
	"github.com/funduq/funduq-go/core/wire"
)

// A thread_messages answer on a thread longer than one frame is a typed
// refusal, not a frame larger than funduq itself would read from the
// provider (FUNDUQ_MAX_FRAME_BYTES): a provider whose read limit matches
// it would lose its link on the answer, ask again after reconnecting, and
// lose it again. A limit that fits is answered.
func TestThreadMessagesOnALongThread(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	runID, thread, _ := h.CompletedRun(p, "echo", "hi")
	// Seed 12 messages of 1 MiB each after the run's own.
	_, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, $2, 'long-' || i, json_build_object('id', 'long-' || i, 'role', 'user', 'content', repeat('x', 1 << 20)), 'caller'
		FROM generate_series(1, 12) i`, thread, runID)
	if err != nil {
		t.Fatal(err)
	}
	p.SendRaw(`{"type":"query","queryId":"q1","method":"thread_messages","params":{"threadId":"` + thread + `"}}`)
	var r wire.QueryResult
	raw := p.Expect(wire.TypeQueryResult, &r)
	if r.Error == "" || int64(len(raw)) > wsconn.MaxFrame || !strings.Contains(r.Error, "limit") {
		t.Fatalf("answer of %d bytes (frame bound %d), error %q; want a refusal that names limit", len(raw), wsconn.MaxFrame, r.Error)
	}
	p.SendRaw(`{"type":"query","queryId":"q2","method":"thread_messages","params":{"threadId":"` + thread + `","limit":3}}`)
	r = wire.QueryResult{}
	p.Expect(wire.TypeQueryResult, &r)
	var msgs []map[string]any
	if err := json.Unmarshal(r.Result, &msgs); err != nil || r.Error != "" || len(msgs) != 3 || msgs[0]["id"] != "long-10" || msgs[2]["id"] != "long-12" {
		t.Fatalf("limit 3: error %q, %d messages", r.Error, len(msgs))
	}
}

// A thread_messages query whose limit is not an integer is refused naming
// limit, not threadId, which it carries.
func TestThreadMessagesBadLimitNamesLimit(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	_, thread, _ := h.CompletedRun(p, "echo", "hi")
	for i, limit := range []string{`1.5`, `"3"`, `1e100`, `true`, `0`, `-1`} {
		p.SendRaw(`{"type":"query","queryId":"q` + string(rune('a'+i)) + `","method":"thread_messages","params":{"threadId":"` + thread + `","limit":` + limit + `}}`)
		var r wire.QueryResult
		p.Expect(wire.TypeQueryResult, &r)
		if r.Result != nil || !strings.Contains(r.Error, "limit") {
			t.Errorf("limit %s: answered %q, want a refusal naming limit", limit, r.Error)
		}
	}
}
