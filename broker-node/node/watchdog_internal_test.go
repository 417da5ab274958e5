package node

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// watchdogGuard bounds each wait in the watchdog test: a hang detector,
// never a timing assertion.
const watchdogGuard = 30 * time.Second

// A node run by systemd as a Type=notify unit with WatchdogSec= says
// READY=1 once it serves, pings WATCHDOG=1 at half WATCHDOG_USEC while its
// lease elector's loop makes progress, sends no ping once the check /livez
// makes says the loop is stuck — so systemd restarts it — and says
// STOPPING=1 as it stops (design.md §A stuck lease loop). Before, it said
// nothing, and under the unit a node whose lease loop hung ran for ever.
func TestWatchdogPingsOnlyWhileTheLeaseLoopProgresses(t *testing.T) {
	sock := listenNotify(t)
	const every = 50 * time.Millisecond // half of WATCHDOG_USEC
	t.Setenv("WATCHDOG_USEC", strconv.FormatInt((2*every).Microseconds(), 10))
	t.Setenv("WATCHDOG_PID", "")
	const ttl = 3 * time.Second
	_, prefix := redistest.Client(t)
	cfg := config.Broker{
		Storage:  config.Storage{DatabaseURL: storetest.URL(t), RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: strings.Repeat("b6", 32), TokenSecret: "watchdog-test-token-secret-0123456789"},
		Waits:    config.Waits{LeaseTTL: ttl, DeliverTimeout: 5 * time.Second, UnservedTimeout: 45 * time.Second, UndeliveredWindow: time.Hour},
		NodeID:   "watched", AdvertiseURL: "http://127.0.0.1:1",
	}
	clock := clockwork.NewFakeClockAt(time.Now())
	n, err := New(context.Background(), cfg, Options{RedisPrefix: prefix, WatchdogClock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The lease's commands alone hang, once the hook is added: the
	// elector's loop is stuck, the rest of the node goes on.
	hang := &hangHook{key: LeaseKey(prefix), reached: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hang.release) }) }
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		release()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("node: %v", err)
			}
		case <-time.After(watchdogGuard):
			t.Error("the node did not stop")
		}
		n.Close()
	})
	guard, cancelGuard := context.WithTimeout(context.Background(), watchdogGuard)
	defer cancelGuard()
	// tick lets the pinger's wait run out once it waits on its clock
	// again: it has handled its previous tick, ping sent or not.
	tick := func(d time.Duration) {
		t.Helper()
		if err := clock.BlockUntilContext(guard, 1); err != nil {
			t.Fatalf("the watchdog never waited for its next ping: %v", err)
		}
		clock.Advance(d)
	}

	if got := sock.next(t); got != "READY=1" {
		t.Fatalf("first notification %q; want READY=1", got)
	}
	for deadline := time.Now().Add(watchdogGuard); ; time.Sleep(5 * time.Millisecond) {
		if leading, _ := n.Broker.Leading(); leading {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the node never led")
		}
	}
	for i := range 3 {
		tick(every)
		if got := sock.next(t); got != "WATCHDOG=1" {
			t.Fatalf("notification %d while the lease loop works: %q; want WATCHDOG=1", i+1, got)
		}
	}

	n.rdb.AddHook(hang)
	select {
	case <-hang.reached: // a renewal (or campaign) is blocked for good
	case <-guard.Done():
		t.Fatal("the elector sent no lease command")
	}
	// The pinger's next tick comes at 2×TTL past now: whatever the loop
	// last did, it did before now, and Check says stuck after 1.75×TTL.
	tick(time.Since(clock.Now()) + 2*ttl)
	if err := n.elector.Check(clock.Now()); !errors.Is(err, lease.ErrStuck) {
		t.Fatalf("Check at the stuck tick: %v; want lease.ErrStuck", err)
	}
	for range 3 {
		tick(every)
	}
	if err := clock.BlockUntilContext(guard, 1); err != nil { // the last tick handled
		t.Fatalf("the watchdog never waited for its next ping: %v", err)
	}
	// The datagrams arrive in the order they were sent: the next one is
	// the stop's unless a stuck tick pinged.
	stop()
	if got := sock.next(t); got != "STOPPING=1" {
		t.Fatalf("after the lease loop got stuck (4 ticks): %q; want no ping, then STOPPING=1 at the stop", got)
	}
	release()
}

// notifySocket is a service manager's notification socket (sd_notify(3))
// as a test listens on it.
type notifySocket struct{ conn *net.UnixConn }

// listenNotify listens on a unixgram socket and sets NOTIFY_SOCKET to it
// for the test.
func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	dir, err := os.MkdirTemp("", "sd") // short: a socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return &notifySocket{conn: conn}
}

// next is the next notification, within a hang guard.
func (s *notifySocket) next(t *testing.T) string {
	t.Helper()
	if err := s.conn.SetReadDeadline(time.Now().Add(watchdogGuard)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	k, err := s.conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification on NOTIFY_SOCKET: %v", err)
	}
	return string(buf[:k])
}
