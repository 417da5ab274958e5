package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/store"
)

// Issue #21, deliverable 7: GET /agents (ListAgents, which the doors
// serve) says online only while a live leader serves the agent: once the
// leader stops leading, no agent reads online although the record of its
// epoch still names them served.
func TestAgentsOfflineOnceTheLeaderStops(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe6, nil)
	p.Register("echo")
	// A door's own store: the node's closes with it.
	st, err := store.Open(t.Context(), h.Cfg.DatabaseURL, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	online := func() bool {
		as, err := st.ListAgents(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(as) == 1 && as[0].Online
	}
	h.Eventually("echo online", online)
	h.Shutdown()
	if online() {
		t.Fatal("GET /agents says online while no node leads")
	}
}
