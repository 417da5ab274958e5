package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/internal/testservers"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

const guard = 15 * time.Second

func TestLeaseCompareAndSet(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	ctx := context.Background()
	a := lease.New(rdb, prefix+"lease", "node-a", 10*time.Second)
	b := lease.New(rdb, prefix+"lease", "node-b", 10*time.Second)
	if ok, err := a.Acquire(ctx); !ok || err != nil {
		t.Fatalf("a acquire: %v %v", ok, err)
	}
	if ok, _ := b.Acquire(ctx); ok {
		t.Fatal("b acquired a held lease")
	}
	if ok, _ := b.Renew(ctx); ok {
		t.Fatal("b renewed a's lease")
	}
	if ok, _ := b.Release(ctx); ok {
		t.Fatal("b released a's lease")
	}
	h, err := lease.ReadHolder(ctx, rdb, prefix+"lease")
	if err != nil || h.NodeID != "node-a" || h.Left <= 0 {
		t.Fatalf("holder %+v %v", h, err)
	}
	if ok, _ := a.Renew(ctx); !ok {
		t.Fatal("a could not renew its lease")
	}
	if ok, _ := a.Release(ctx); !ok {
		t.Fatal("a could not release its lease")
	}
	if _, err := lease.ReadHolder(ctx, rdb, prefix+"lease"); !errors.Is(err, lease.ErrNoHolder) {
		t.Fatalf("after release: %v", err)
	}
	if ok, _ := b.Acquire(ctx); !ok {
		t.Fatal("b could not acquire a released lease")
	}
}

// elect runs an elector whose Lead records its leadership and the cause
// that ended it.
type elect struct {
	e      *lease.Elector
	led    chan struct{}
	ended  chan error
	cancel context.CancelFunc
	done   chan struct{}
}

func startElector(t *testing.T, rdb redis.UniversalClient, prefix, node string, ttl time.Duration) *elect {
	el := &elect{led: make(chan struct{}, 8), ended: make(chan error, 8), done: make(chan struct{})}
	el.e = &lease.Elector{Lease: lease.New(rdb, prefix+"lease", node, ttl), Channel: prefix + "events",
		Lead: func(ctx context.Context) {
			el.led <- struct{}{}
			<-ctx.Done()
			el.ended <- context.Cause(ctx)
		}}
	ctx, cancel := context.WithCancel(context.Background())
	el.cancel = cancel
	go func() { defer close(el.done); _ = el.e.Run(ctx) }()
	t.Cleanup(el.stop)
	return el
}

func (el *elect) stop() {
	el.cancel()
	<-el.done
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(guard):
		t.Fatalf("gave up waiting: %s", what)
	}
	var zero T
	return zero
}

// One of two electors leads; when it stops, it releases the lease and the
// other takes over without waiting for the lease to expire.
func TestElectorOneLeaderAndReleaseOnStop(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	ttl := time.Hour // takeover must not depend on expiry
	a := startElector(t, rdb, prefix, "a", ttl)
	wait(t, a.led, "a leads")
	b := startElector(t, rdb, prefix, "b", ttl)
	select {
	case <-b.led:
		t.Fatal("two leaders")
	default:
	}
	a.stop()
	wait(t, a.ended, "a's leadership ends")
	wait(t, b.led, "b takes over after a released")
	if h, _ := lease.ReadHolder(context.Background(), rdb, prefix+"lease"); h.NodeID != "b" {
		t.Fatalf("holder %+v", h)
	}
}

// A handover request ends the leader's term with ErrHandover, and the
// standby takes the lease.
func TestElectorHandover(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	a := startElector(t, rdb, prefix, "a", time.Hour)
	wait(t, a.led, "a leads")
	b := startElector(t, rdb, prefix, "b", time.Hour)
	if n, err := lease.RequestHandover(context.Background(), rdb, prefix+"events"); err != nil || n < 1 {
		t.Fatalf("handover request reached %d subscribers: %v", n, err)
	}
	if cause := wait(t, a.ended, "a hands over"); !errors.Is(cause, lease.ErrHandover) {
		t.Fatalf("cause %v", cause)
	}
	wait(t, b.led, "b takes over")
}

// A lease taken from under the leader ends its leadership (ErrLost).
func TestElectorLostLease(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	a := startElector(t, rdb, prefix, "a", 600*time.Millisecond)
	wait(t, a.led, "a leads")
	rdb.Set(context.Background(), prefix+"lease", "usurper x", time.Hour)
	if cause := wait(t, a.ended, "a notices"); !errors.Is(cause, lease.ErrLost) {
		t.Fatalf("cause %v", cause)
	}
}

// A leader that cannot reach Redis steps down before its lease can expire:
// when its leadership ends the key still has time to live, so no other node
// could have acquired yet.
func TestElectorSelfFences(t *testing.T) {
	watch, prefix := redistest.Client(t)
	own := redis.NewClient(&redis.Options{Addr: watch.Options().Addr, DB: watch.Options().DB})
	a := startElector(t, own, prefix, "a", 2*time.Second)
	wait(t, a.led, "a leads")
	var once sync.Once
	once.Do(func() { own.Close() }) // every renewal now fails
	cause := wait(t, a.ended, "a steps down")
	left := watch.PTTL(context.Background(), prefix+"lease").Val()
	if !errors.Is(cause, lease.ErrExpiring) {
		t.Fatalf("cause %v", cause)
	}
	if left <= 0 {
		t.Fatalf("a stepped down only after its lease could have expired (pttl %v)", left)
	}
	t.Logf("stepped down with %v of the 2s lease left", left)
}

// A leader whose Redis hangs — it accepts the renewal and never answers, as
// in a partition that drops packets — still steps down before its lease can
// expire: a renewal call never outlives the fence. The lease's expiry is
// read from Redis (PTTL) just after a renewal landed, then Redis is frozen;
// the leader's term must end before that expiry. (The bound compared is the
// lease rule itself, with a quarter of the TTL to spare.)
func TestElectorSelfFencesWhenRedisHangs(t *testing.T) {
	rs := testservers.RedisServer(t)
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	// As the broker node builds its client: every call bounded by its
	// context (go-redis ignores context deadlines otherwise).
	opt.ContextTimeoutEnabled = true
	watch := redis.NewClient(opt)
	t.Cleanup(func() { watch.Close() })
	own := redis.NewClient(opt)
	t.Cleanup(func() { own.Close() })
	const ttl = 3 * time.Second
	ctx := context.Background()
	a := startElector(t, own, "hang:", "a", ttl)
	wait(t, a.led, "a leads")

	// Wait for a renewal to land (the key's PTTL jumps back up), so none
	// is due for a third of the TTL, and freeze Redis at once.
	var expiry time.Time
	prev := watch.PTTL(ctx, "hang:lease").Val()
	deadline := time.Now().Add(guard)
	for {
		left := watch.PTTL(ctx, "hang:lease").Val()
		if left > prev+100*time.Millisecond {
			expiry = time.Now().Add(left)
			rs.Freeze()
			break
		}
		prev = left
		if time.Now().After(deadline) {
			t.Fatal("no renewal landed")
		}
		time.Sleep(2 * time.Millisecond)
	}
	cause := wait(t, a.ended, "a steps down")
	ended := time.Now()
	rs.Thaw()
	if !errors.Is(cause, lease.ErrExpiring) {
		t.Fatalf("cause %v, want ErrExpiring", cause)
	}
	if !ended.Before(expiry) {
		t.Fatalf("a led until %v after its lease could have expired", ended.Sub(expiry))
	}
	t.Logf("stepped down %v before the lease could expire", expiry.Sub(ended).Round(time.Millisecond))
}

// Failover chaos seed 225 (FUNDUQ_FAILOVER_SEEDS=225 go test -run
// TestFailoverChaos ./broker-node/): the leader, frozen past its lease,
// stepped down before the lease could expire (ErrExpiring), released the
// lease once it could reach Redis again and took it straight back, before
// the standby woken by the release could: the node that had just failed
// kept the lead, and the standby never led. A leader that stepped down on
// its own waits the cool-off before campaigning again, so the standby gets
// the lease first (design.md D10) — one that could not renew too.
func TestElectorThatSelfFencedLetsTheStandbyLeadFirst(t *testing.T) {
	rs, watch, ownA, ownB := privateRedisClients(t)
	ctx := context.Background()
	a := startElectorWith(t, ownA, "fenced:", "a", time.Second, func(e *lease.Elector) { e.Cooloff = guard })
	wait(t, a.led, "a leads")
	rs.Freeze()
	cause := wait(t, a.ended, "a steps down")
	rs.Thaw()
	if !errors.Is(cause, lease.ErrExpiring) {
		t.Fatalf("cause %v, want ErrExpiring", cause)
	}
	// a releases the lease once Redis answers again; the standby starts
	// then and campaigns once (no retry, no wake-up), so it leads only if
	// a did not take the lease straight back.
	deadline := time.Now().Add(guard)
	for {
		select {
		case <-a.led:
			t.Fatal("a, which had just stepped down for want of renewals, took the lease straight back")
		default:
		}
		if watch.Exists(ctx, "fenced:lease").Val() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a did not release the lease once Redis answered again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b := startElectorWith(t, ownB, "fenced:", "b", time.Second, func(e *lease.Elector) { e.Channel, e.RetryEvery = "", time.Hour })
	select {
	case <-a.led:
		t.Fatal("a, which had just stepped down for want of renewals, took the lease back before the standby")
	case <-b.led:
	case <-time.After(guard):
		t.Fatal("nobody leads after a stepped down")
	}
}

func startElectorWith(t *testing.T, rdb redis.UniversalClient, prefix, node string, ttl time.Duration, mut func(*lease.Elector)) *elect {
	el := &elect{led: make(chan struct{}, 8), ended: make(chan error, 8), done: make(chan struct{})}
	el.e = &lease.Elector{Lease: lease.New(rdb, prefix+"lease", node, ttl), Channel: prefix + "events",
		Lead: func(ctx context.Context) {
			el.led <- struct{}{}
			<-ctx.Done()
			el.ended <- context.Cause(ctx)
		}}
	mut(el.e)
	ctx, cancel := context.WithCancel(context.Background())
	el.cancel = cancel
	go func() { defer close(el.done); _ = el.e.Run(ctx) }()
	t.Cleanup(el.stop)
	return el
}

// Failover chaos seed 310: with the fenced node cooling off, the standby
// that took over was asked to hand over and cooled off in turn; the fenced
// node, woken by that release while still cooling off, went back to sleep
// until its next retry, and the node just asked to hand over took the
// lease back. A node cooling off campaigns the moment its cool-off ends.
func TestElectorCampaignsWhenItsCooloffEnds(t *testing.T) {
	rs, watch, ownA, ownB := privateRedisClients(t)
	ctx := context.Background()
	// Neither retries on its own: a campaign follows a wake-up (a release
	// published) or the end of a cool-off.
	a := startElectorWith(t, ownA, "cool:", "a", time.Second, func(e *lease.Elector) { e.Cooloff, e.RetryEvery = time.Second, time.Hour })
	wait(t, a.led, "a leads")
	b := startElectorWith(t, ownB, "cool:", "b", time.Second, func(e *lease.Elector) { e.Cooloff, e.RetryEvery = guard, time.Hour })
	deadline := time.Now().Add(guard)
	for watch.PubSubNumSub(ctx, "cool:events").Val()["cool:events"] < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the electors did not subscribe to the lease events")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rs.Freeze()
	if cause := wait(t, a.ended, "a steps down"); !errors.Is(cause, lease.ErrExpiring) {
		t.Fatalf("cause %v, want ErrExpiring", cause)
	}
	rs.Thaw()
	wait(t, b.led, "b takes over once a released")
	if n, err := lease.RequestHandover(ctx, watch, "cool:events"); err != nil || n < 1 {
		t.Fatalf("handover request reached %d subscribers: %v", n, err)
	}
	if cause := wait(t, b.ended, "b hands over"); !errors.Is(cause, lease.ErrHandover) {
		t.Fatalf("cause %v, want ErrHandover", cause)
	}
	select {
	case <-a.led:
	case <-b.led:
		t.Fatal("b, asked to hand over, took the lease back")
	case <-time.After(guard):
		t.Fatal("nobody leads after the handover: a, cooling off when it was woken, did not campaign when its cool-off ended")
	}
}

// privateRedisClients are three clients of a Redis of the test's own
// (testservers.RedisServer, returned: the test may freeze and thaw it):
// one to watch the lease with and one for each of two electors.
func privateRedisClients(t *testing.T) (rs *testservers.Redis, watch, a, b *redis.Client) {
	t.Helper()
	rs = testservers.RedisServer(t)
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	clients := make([]*redis.Client, 3)
	for i := range clients {
		clients[i] = redis.NewClient(opt)
		t.Cleanup(func() { clients[i].Close() })
	}
	return rs, clients[0], clients[1], clients[2]
}
