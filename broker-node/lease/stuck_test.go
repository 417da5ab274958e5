package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/redistest"
)

// blocker is a go-redis hook that, once held, blocks every command for
// good, whatever its context says: a call that never returns (a client
// without deadlines on a hung Redis, a deadlock under the client).
type blocker struct {
	held    atomic.Bool
	reached chan struct{} // closed when a command is blocked
	release chan struct{} // closed to let blocked commands go (the test's end)
	once    sync.Once
}

func newBlocker() *blocker {
	return &blocker{reached: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *blocker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (b *blocker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if b.held.Load() {
			b.once.Do(func() { close(b.reached) })
			<-b.release
			cmd.SetErr(errors.New("blocked"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

// runStuck runs e until the test ends, calling release first (when not
// nil) to let blocked calls go, so Run can return.
func runStuck(t *testing.T, e *lease.Elector, release func()) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = e.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if release != nil {
			release()
		}
		<-stopped
		if err := e.Check(time.Now().Add(time.Hour)); err != nil {
			t.Errorf("Check after Run returned: %v; want nil (not running is not stuck)", err)
		}
	})
}

// A leader whose renewal never returns still believes it leads — its
// fence timer is never read, Lead's context never ends — while its lease
// runs out and a standby takes over: two leaders. Check is the liveness
// check that has a supervisor restart it (client-go's leaderelection
// HealthzAdaptor; design.md §Failure, the lease): healthy while renewals
// land, stuck once none has landed for TTL + StuckAfter.
func TestElectorCheckLeaderRenewalNeverReturns(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	b := newBlocker()
	rdb.AddHook(b)
	const ttl, stuckAfter = 6 * time.Second, time.Second
	led := make(chan struct{})
	var lctx context.Context
	e := &lease.Elector{Lease: lease.New(rdb, prefix+"lease", "node-a", ttl), StuckAfter: stuckAfter,
		Lead: func(ctx context.Context) { lctx = ctx; close(led); <-ctx.Done() }}
	runStuck(t, e, func() { close(b.release) })
	select {
	case <-led:
	case <-time.After(guard):
		t.Fatal("the elector did not lead")
	}
	if err := e.Check(time.Now()); err != nil {
		t.Fatalf("Check on a leader that just acquired: %v; want healthy", err)
	}
	b.held.Store(true)
	select {
	case <-b.reached: // a renewal is blocked for good
	case <-time.After(guard):
		t.Fatal("the leader did not renew")
	}
	if !e.Leading() || lctx.Err() != nil {
		t.Fatalf("Leading %v, Lead's context %v; want a leader that still believes it leads", e.Leading(), lctx.Err())
	}
	err := e.Check(time.Now().Add(ttl + stuckAfter + time.Millisecond))
	if !errors.Is(err, lease.ErrStuck) {
		t.Fatalf("Check past TTL + StuckAfter with the renewal blocked: %v; want ErrStuck", err)
	}
	t.Logf("Check: %v", err)
}

// A standby whose campaign never returns takes no lease when the leader
// goes: Check calls it stuck, while a standby whose campaigns complete —
// here lost to a holder — is healthy.
func TestElectorCheckStandbyCampaignNeverReturns(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	const ttl = 6 * time.Second
	holder := lease.New(rdb, prefix+"lease", "node-a", time.Minute)
	if ok, err := holder.Acquire(context.Background()); !ok || err != nil {
		t.Fatalf("node-a acquire: %v %v", ok, err)
	}

	// Healthy: campaigns complete, lost (each command counted).
	lost := make(chan struct{}, 16)
	rdb.AddHook(hookFunc(func(next redis.ProcessHook) redis.ProcessHook {
		return func(ctx context.Context, cmd redis.Cmder) error {
			err := next(ctx, cmd)
			select {
			case lost <- struct{}{}:
			default:
			}
			return err
		}
	}))
	standby := &lease.Elector{Lease: lease.New(rdb, prefix+"lease", "node-b", ttl), RetryEvery: 50 * time.Millisecond,
		Lead: func(ctx context.Context) { <-ctx.Done() }}
	runStuck(t, standby, nil)
	for range 3 {
		select {
		case <-lost:
		case <-time.After(guard):
			t.Fatal("the standby did not campaign")
		}
	}
	if err := standby.Check(time.Now()); err != nil {
		t.Fatalf("Check on a standby whose campaigns complete: %v; want healthy", err)
	}

	// Stuck: a campaign that never returns.
	rdb2, _ := redistest.Client(t)
	b := newBlocker()
	b.held.Store(true)
	rdb2.AddHook(b)
	stuck := &lease.Elector{Lease: lease.New(rdb2, prefix+"lease", "node-c", ttl),
		Lead: func(ctx context.Context) { <-ctx.Done() }}
	runStuck(t, stuck, func() { close(b.release) })
	select {
	case <-b.reached:
	case <-time.After(guard):
		t.Fatal("the standby did not campaign")
	}
	err := stuck.Check(time.Now().Add(2 * ttl))
	if !errors.Is(err, lease.ErrStuck) {
		t.Fatalf("Check 2×TTL on with the campaign blocked: %v; want ErrStuck", err)
	}
	t.Logf("Check: %v", err)
}

// hookFunc is a go-redis hook of a ProcessHook alone.
type hookFunc func(redis.ProcessHook) redis.ProcessHook

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return h(next) }
func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
