package node_test

import (
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// A standby reads the published key for tickets (design.md §Deployment,
// "One identity key"); when that read cannot finish — a migration's
// ALTER TABLE queued on broker_leader, a slow PostgreSQL — it falls back on
// the key it read last. Every request that waited on the failed read takes
// that fallback too: a burst of ticket requests (an ALB failing open
// between leaders sends them all to standbys) is answered, not turned into
// 503s by requests queued behind one another's reads until their
// IssueTimeout ran out.
func TestStandbyTicketsBurstThroughAStalledLeaderRead(t *testing.T) {
	a := nodetest.Start(t, nil)
	c := a.Peer("node-c") // a's key
	key := a.Node.FunduqKey()
	if code, body := readyzBody(t, c); body["identity_key"] != "ok" {
		t.Fatalf("c's /readyz %d %v; want identity_key ok", code, body)
	}
	// Past the 5 s a standby takes the key it read as current, so the
	// next ticket reads the row again.
	time.Sleep(5*time.Second + 100*time.Millisecond)
	release := a.Hold(`LOCK TABLE broker_leader IN ACCESS EXCLUSIVE MODE`)
	const n = 8
	answers := make([]ticketAnswer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = askTicket(t, c.URL, byte(10+i))
		}()
	}
	wg.Wait()
	release()
	for i, got := range answers {
		if got.status != 201 || got.json["funduqPublicKey"] != key {
			t.Errorf("request %d of %d while the leader row was locked: POST /tickets %d Retry-After %q %s; "+
				"want 201 naming the key read last, %s", i+1, n, got.status, got.retry, got.body, key)
		}
	}
}
