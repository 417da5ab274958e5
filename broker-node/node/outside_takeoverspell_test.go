package node_test

import (
	"net/http"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// A node ID is the operator's (FUNDUQ_NODE_ID, any string, taken as
// written: nothing trims a stray trailing space). The lease's value is
// "<node id> <token>" and the leader row names the node ID: a leader whose
// ID holds a space ("broker a", or "node-a " with its stray space) is the
// row's holder and the lease's alike, so no takeover is under way, and a
// standby issues tickets (design.md §Deployment, "A takeover under way").
// Reading the lease's holder up to its first space made every standby see
// a takeover for as long as that node led: every ticket refused, for ever.
func TestStandbyReadsTheHolderOfANodeIDWithASpace(t *testing.T) {
	for _, id := range []string{"broker a", "node-a "} {
		t.Run(id, func(t *testing.T) {
			c := nodetest.Start(t, func(cfg *configBroker) { cfg.NodeID = id })
			b := c.Peer("broker b")
			// The barrier: c leads, its row and lease written (its /readyz is 200).
			if code, body := readyzBody(t, c); code != http.StatusOK {
				t.Fatalf("leader /readyz: %d %v", code, body)
			}
			_, body := readyzBody(t, b)
			if body["takeover"] != "none" || body["leader"] != c.Cfg.AdvertiseURL {
				t.Errorf("standby /readyz while %q leads steadily: takeover %v leader %v; want none and %s",
					c.Cfg.NodeID, body["takeover"], body["leader"], c.Cfg.AdvertiseURL)
			}
			if a := ticketFrom(t, b.Node, 3); a.status != http.StatusCreated {
				t.Errorf("standby POST /tickets while %q leads steadily: %d %s; want 201", c.Cfg.NodeID, a.status, a.body)
			}
		})
	}
}
