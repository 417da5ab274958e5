package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/internal/testservers"
)

// An operator's `lease status` (and `lease handover`) against a Redis
// that hangs (connections accepted, never answered) ends with an error
// naming the lease, whatever timeouts the Redis URL gives the client:
// here none (read_timeout=0). Before, the tool's client ignored context
// deadlines and the command waited for ever (design.md §A hung Redis).
func TestLeaseToolEndsWhileRedisHangs(t *testing.T) {
	env := map[string]string{"FUNDUQ_DATABASE_URL": storetest.URL(t),
		"FUNDUQ_REDIS_URL": "redis://" + testservers.Stuck(t) + "/0?read_timeout=0", "FUNDUQ_REDIS_PREFIX": "hang:"}
	for _, args := range [][]string{{"lease", "status"}, {"lease", "handover", "--wait", "1s"}} {
		var out, errb bytes.Buffer
		done := make(chan int, 1)
		go func() { done <- run(args, env, &out, &errb) }()
		select {
		case code := <-done:
			if code == 0 || !strings.Contains(errb.String(), "lease") {
				t.Errorf("%v: exit %d, stderr %q; want a failure naming the lease", args, code, errb.String())
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%v had not ended 15s in on a hung Redis", args)
		}
	}
}
