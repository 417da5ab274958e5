package node_test

import (
	"context"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// Killing the broker's LISTEN backend loses no run: a run inserted around
// the kill is still offered (the listener reconnects and catches up).
func TestLostNotifyLosesNoRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	kill := func() int {
		var n int
		err := h.Store.Pool().QueryRow(context.Background(),
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'funduq-broker-intake' AND datname = current_database()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	h.Eventually("the intake listener is connected", func() bool { return kill() == 1 })
	id, _ := h.Door(p.Key, "echo", "", "while the listener was down")
	if f := p.Offer(); f.RunID != id {
		t.Fatalf("offer %s, want %s", f.RunID, id)
	}
}
