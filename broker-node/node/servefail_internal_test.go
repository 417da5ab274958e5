package node

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// failingListener accepts nothing: once failed is closed, Accept answers
// a permanent error, as a listener whose socket broke does.
type failingListener struct {
	net.Listener
	failed chan struct{}
}

func (l *failingListener) Accept() (net.Conn, error) {
	<-l.failed
	return nil, errors.New("accept: the socket broke")
}

// A node whose HTTP server fails while nothing asked it to stop returns
// that error from Run, its lease loop, announcer and watchdog pinger
// stopped — so its supervisor restarts it (design.md §Deployment). It used
// to wait on those for ever: they stop only with Run's context, and the
// node kept its lease and its watchdog pings with nobody able to reach it.
func TestRunReturnsWhenItsServerFails(t *testing.T) {
	_, prefix := redistest.Client(t)
	cfg := config.Broker{
		Storage:  config.Storage{DatabaseURL: storetest.URL(t), RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: strings.Repeat("c7", 32), TokenSecret: "servefail-test-token-secret-0123456789"},
		Waits:    config.Waits{LeaseTTL: 3 * time.Second, DeliverTimeout: 5 * time.Second, UnservedTimeout: 45 * time.Second, UndeliveredWindow: time.Hour},
		NodeID:   "servefail", AdvertiseURL: "http://127.0.0.1:1",
	}
	n, err := New(context.Background(), cfg, Options{RedisPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	ln := &failingListener{Listener: inner, failed: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx, ln) }()
	close(ln.failed)
	// A hang guard, not a timing assertion: before, Run never returned.
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "the socket broke") {
			t.Fatalf("Run returned %v; want the server's error", err)
		}
	case <-time.After(30 * time.Second):
		stop() // let the node go so the test ends
		<-done
		t.Fatal("Run did not return after its server failed (it returned only once its context was cancelled)")
	}
}
