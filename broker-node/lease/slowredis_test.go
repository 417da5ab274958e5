package lease_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/redistest"
)

// A healthy Redis that answers each request in 1.2 s — under the 1.5 s
// bound on a campaign — must still be won by a standby on a fresh client.
// It is not: each campaign sets up a new connection first (HELLO + the
// script, 2.4 s). docs/design.md §Open questions, "A slow Redis and the
// elector's bounds".
func TestElectorAcquiresOnASlowRedis(t *testing.T) {
	t.Skip("open: docs/design.md §Open questions, a slow Redis and the elector's bounds")
	rdb, prefix := redistest.Client(t)
	p := newSilencingProxy(t, rdb.Options().Addr)
	p.delay(1200 * time.Millisecond)
	opt := *rdb.Options()
	opt.Addr = p.addr()
	opt.ContextTimeoutEnabled = true // as broker-node/node builds its client
	own := redis.NewClient(&opt)
	t.Cleanup(func() { own.Close() })
	a := startElector(t, own, prefix, "a", 10*time.Second)
	wait(t, a.led, "a leads on a Redis answering in 1.2 s")
}
