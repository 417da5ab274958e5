package node_test

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/core/wire"
)

// gatedConn is a provider's socket whose network holds what funduq writes
// while gate (set by the test) is open, and then delivers it all, read as
// it comes: a network slower for a moment than the leader's lanes.
type gatedConn struct {
	net.Conn
	gate *atomic.Pointer[chan struct{}]
}

func (c gatedConn) Read(b []byte) (int, error) {
	if g := c.gate.Load(); g != nil {
		<-*g
	}
	return c.Conn.Read(b)
}

// metricValue is the value of the metrics line that starts with name, 0
// when there is none.
func metricValue(t *testing.T, h *nodetest.Harness, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(metrics(t, h), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// A provider that declares no concurrency limit and comes to thousands of
// queued runs of its agent (here read back at a takeover; equally after
// it was away within its grace while callers kept starting runs) is
// offered them all at once, one lane each, faster than a network carries
// them. It reads everything as its network delivers it. funduq's own
// burst is not a peer that stopped reading: the link stays up, every run
// is offered once, and the runs it takes complete. The 4,096-frame bound
// on what waits for the writer counted the offers, so the link was cut
// off (1013) mid-burst, its offers went back to queued and were offered
// as one burst again at its reconnect: cut off in a loop, serving nothing.
func TestRawPromptReaderOfABurstOfOffersIsNotCutOff(t *testing.T) {
	const n = 6000
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x0b))
	if err != nil {
		t.Fatal(err)
	}
	key := s.PublicKeyHex()
	dbURL := storetest.URL(t)
	st, err := store.Open(t.Context(), dbURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	storetest.Agent(t, st, key, "echo")
	// One run as a door writes it, and n-1 more like it, each on a thread
	// of its own (the head of its thread, so each is offered at once).
	runID, thread := run.NewRunID(), run.NewThreadID()
	in, err := runinput.Build(runinput.Request{ThreadID: thread, RunID: runID,
		Messages: []json.RawMessage{json.RawMessage(`{"id":"c1","role":"user","content":"` + strings.Repeat("x", 4<<10) + `"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CreateRun(t.Context(), store.NewRun{RunID: runID, ThreadID: thread, ProviderKey: key, AgentName: "echo",
		RunInput: in.Bytes, CreateThread: &store.NewThread{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(t.Context(), `
		WITH g AS (SELECT 'thread_' || lpad(to_hex(g), 24, '0') AS tid, 'run_' || lpad(to_hex(g), 24, '0') AS rid
		           FROM generate_series(1, $2::int - 1) g),
		t AS (INSERT INTO threads (thread_id, provider_key, agent_name, metadata)
		      SELECT g.tid, th.provider_key, th.agent_name, th.metadata FROM g, threads th WHERE th.thread_id = $1)
		INSERT INTO runs (run_id, thread_id, provider_key, agent_name, status, run_input)
		SELECT g.rid, g.tid, r.provider_key, r.agent_name, r.status,
		       replace(replace(r.run_input::text, r.run_id, g.rid), r.thread_id, g.tid)::json
		FROM g, runs r WHERE r.thread_id = $1`, thread, n); err != nil {
		t.Fatal(err)
	}

	_, prefix := redistest.Client(t)
	// A real clock, as in production: the fake one keeps its timers in a
	// sorted list, and arming thousands of offers' clocks paced the lanes.
	h := nodetest.StartOn(t, dbURL, redistest.URL(), prefix, func(c *config.Broker) { c.DeliverTimeout = time.Hour },
		func(o *node.Options) { o.Clock = clockwork.NewRealClock() })
	h.Eventually("every queued run read back into a lane", func() bool { return len(h.Node.Broker.Snapshot().Lanes) == n })

	var gate atomic.Pointer[chan struct{}]
	d := &websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return gatedConn{c, &gate}, err
	}}
	p := rawDial(t, h, 0x0b, d) // no maxConcurrentRuns: no limit
	held := make(chan struct{})
	gate.Store(&held)
	p.text(`{"type":"register","agents":[{"name":"echo","description":"raw"}]}`)
	// The network delivers once every offer has left its lane (but one,
	// which may be writing its own, SendNow), or the link is gone.
	h.Eventually("the burst is sent", func() bool {
		return metricValue(t, h, `funduq_broker_offers_total{outcome="sent"}`) >= n-1 ||
			metricValue(t, h, "funduq_broker_provider_links") == 0
	})
	close(held)

	offered := map[string]bool{}
	registered := false
	for !registered || len(offered) < n {
		f := p.next() // fails the test if the link is closed meanwhile
		var m struct{ Type, RunID string }
		if err := jsonUnmarshal(f.data, &m); err != nil {
			t.Fatalf("frame %q: %v", f.data, err)
		}
		switch m.Type {
		case wire.TypeRegistered:
			registered = true
		case wire.TypeRun:
			if offered[m.RunID] {
				t.Fatalf("run %s offered twice", m.RunID)
			}
			offered[m.RunID] = true
		default:
			t.Fatalf("unexpected frame %s", f.data)
		}
	}
	// Nothing more was offered: every run once.
	for _, m := range p.barrier("after-burst") {
		t.Fatalf("frame after every run was offered: %v", m)
	}
	// The link serves: the runs taken play through.
	runs, err := st.RunsInStatus(t.Context(), string(run.Offering), string(run.Queued))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs[:3] {
		p.text(`{"type":"ack","runId":"` + r.RunID + `"}`)
		rawComplete(p, r.RunID, r.ThreadID)
		h.WaitStatus(r.RunID, run.Completed)
	}
}
