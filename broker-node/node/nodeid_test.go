package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// shortTTL makes nodes announce every second (a third of the lease TTL).
func shortTTL(cfg *configBroker) { cfg.LeaseTTL = 3 * time.Second }

// announcement reads the raw entry the nodes hash holds under id ("" none).
func announcement(t *testing.T, h *nodetest.Harness, id string) string {
	t.Helper()
	opt, err := redis.ParseURL(h.Cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	v, err := rdb.HGet(context.Background(), node.NodesKey(h.Prefix), id).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// announcedAgain is a barrier: it waits until the entry under id has been
// rewritten n times from now, so every node announcing under id has read
// what it replaced more than once.
func announcedAgain(t *testing.T, h *nodetest.Harness, id string, n int) {
	t.Helper()
	last, seen := announcement(t, h, id), 0
	h.Eventually(fmt.Sprintf("%d announcements under %s", n, id), func() bool {
		if v := announcement(t, h, id); v != "" && v != last {
			last, seen = v, seen+1
		}
		return seen >= n
	})
}

func conflicts(t *testing.T, h *nodetest.Harness) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^funduq_node_id_conflicts_total (\d+)$`).FindStringSubmatch(metrics(t, h))
	if m == nil {
		t.Fatalf("/metrics has no funduq_node_id_conflicts_total")
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func nodeIDState(t *testing.T, h *nodetest.Harness) any {
	t.Helper()
	_, body := readyzBody(t, h)
	return body["node_id"]
}

// Two nodes given one FUNDUQ_NODE_ID look like one to the lease, the
// leader row and the console; each is told: /readyz says "node_id":
// "duplicate" on both, /metrics counts it, and both keep running
// (design.md §Deployment, "One node id per node").
func TestTwoNodesUnderOneNodeIDAreTold(t *testing.T) {
	a := nodetest.Start(t, shortTTL)
	b := a.Peer(a.Cfg.NodeID)
	for _, h := range []*nodetest.Harness{a, b} {
		h.Eventually("/readyz says node_id duplicate", func() bool { return nodeIDState(t, h) == "duplicate" })
		if n := conflicts(t, h); n < 1 {
			t.Errorf("funduq_node_id_conflicts_total %d; want at least 1", n)
		}
	}
	if !a.Ready() {
		t.Errorf("the leader stopped being ready on a duplicate node id")
	}
}

// Nodes with IDs of their own are "unique", checked after each has
// announced (and read what it replaced) several times.
func TestNodesWithTheirOwnIDsAreUnique(t *testing.T) {
	a := nodetest.Start(t, shortTTL)
	b := a.Peer("node-b")
	announcedAgain(t, a, a.Cfg.NodeID, 3)
	announcedAgain(t, a, "node-b", 3)
	for _, h := range []*nodetest.Harness{a, b} {
		if got := nodeIDState(t, h); got != "unique" {
			t.Errorf("%s: /readyz node_id %v; want unique", h.Cfg.NodeID, got)
		}
		if n := conflicts(t, h); n != 0 {
			t.Errorf("%s: funduq_node_id_conflicts_total %d; want 0", h.Cfg.NodeID, n)
		}
	}
}

// A node restarted under its id finds its previous process's entry, which
// a process that was killed leaves until its TTL: that is not another
// live process, and once the new process has announced over it the node
// is "unique".
func TestARestartedNodeIsNotItsOwnDuplicate(t *testing.T) {
	a := nodetest.Start(t, shortTTL)
	id := a.Cfg.NodeID
	announcedAgain(t, a, id, 1)
	left := announcement(t, a, id)
	a.Shutdown() // removes its entry; a killed process would not
	var entry map[string]any
	if err := json.Unmarshal([]byte(left), &entry); err != nil {
		t.Fatal(err)
	}
	entry["at"] = time.Now().UnixMilli() // fresh, as a kill leaves it
	raw, _ := json.Marshal(entry)
	opt, err := redis.ParseURL(a.Cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.HSet(context.Background(), node.NodesKey(a.Prefix), id, raw).Err(); err != nil {
		t.Fatal(err)
	}

	again := a.Peer(id)
	announcedAgain(t, again, id, 3)
	if got := nodeIDState(t, again); got != "unique" {
		t.Errorf("restarted node: /readyz node_id %v; want unique", got)
	}
	if n := conflicts(t, again); n != 0 {
		t.Errorf("restarted node: funduq_node_id_conflicts_total %d; want 0", n)
	}
}
