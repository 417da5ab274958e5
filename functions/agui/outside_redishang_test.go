package agui_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/internal/testservers"
)

// A door whose Redis hangs (connections accepted, never answered) serves
// a run's stream from PostgreSQL by its own bounds (D13: fail fast;
// design.md §Doors under storage faults), whatever timeouts its Redis URL
// gives the client — here none (read_timeout=0: go-redis then waits for
// ever): each wait on the live feed ends at its block plus the door's
// slack. Before, a feed read waited as long as the Redis client let it
// (block + 10 s, or the client's read timeout as it set a connection up;
// here for ever, the caller gone or not), so the stream relayed nothing.
func TestOutsideStreamServedWhileRedisHangs(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	hung := testservers.Hang(t, "")
	addr, unhang := hung.Addr, hung.Release
	srv := startDoorWith(t, mustDeps(t, h, "redis://"+addr+"/0?read_timeout=0"), nil)
	// Runs before the door's own cleanup, so a handler stuck on the hung
	// Redis (before the fix) is let go and the server can close.
	t.Cleanup(unhang)
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	got := typesOf(t, s.rest())
	if len(got) == 0 || got[0] != "RUN_STARTED" || got[len(got)-1] != "RUN_FINISHED" {
		t.Fatalf("the stream relayed %v, want the run from RUN_STARTED to RUN_FINISHED", got)
	}
}
