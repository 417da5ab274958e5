package lease_test

import (
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/redistest"
)

// A healthy Redis that answers each request in 1.2 s is still won by a
// standby on a fresh client. A campaign sets up a new connection first
// (HELLO + the script, 2.4 s): when each campaign was bounded at
// redisbound's 1.5 s, the standby never led ("gave up waiting: a leads on
// a Redis answering in 1.2 s"); a campaign is now bounded by what the
// lease is worth (TTL − Margin, design.md §A hung Redis).
func TestElectorAcquiresOnASlowRedis(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	p, own := throughProxy(t, rdb)
	p.delay(1200 * time.Millisecond)
	a := startElector(t, own, prefix, "a", 10*time.Second)
	wait(t, a.led, "a leads on a Redis answering in 1.2 s")
}
