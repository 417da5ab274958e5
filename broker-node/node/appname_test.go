package node_test

import (
	"context"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// An operator looking at pg_stat_activity (or a test killing the broker's
// backends) can tell the broker's connections from the doors' and from
// the broker's LISTEN connection: each pool names itself.
func TestBrokerConnectionsAreNamed(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xa7, nil)
	p.Register("echo")
	h.CompletedRun(p, "echo", "hi")
	var n int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'funduq-broker'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no connection of this database is named funduq-broker")
	}
}
