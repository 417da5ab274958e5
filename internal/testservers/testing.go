package testservers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/store"
)

// missing skips the test — or fails it under CI=true, where a skipped
// outage test is not a passing one.
func missing(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("required under CI=true: %v", err)
	}
	t.Skipf("skipped: %v (run the tests with scripts/test on a machine with postgresql and redis-server)", err)
}

// PG starts a private PostgreSQL for this test, stopped and removed when
// the test ends.
func PG(t testing.TB) *Postgres {
	t.Helper()
	p, err := StartPostgres()
	if errors.Is(err, ErrMissing) {
		missing(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("private PostgreSQL log (%s):\n%s", p.log, p.logTail())
		}
		p.Close()
	})
	return p
}

// RedisServer starts a private Redis for this test, stopped and removed
// when the test ends.
func RedisServer(t testing.TB) *Redis {
	t.Helper()
	r, err := StartRedis()
	if errors.Is(err, ErrMissing) {
		missing(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

var dbSeq atomic.Int64

// MigratedDB creates a database on p with funduq's schema and returns its
// URL.
func MigratedDB(ctx context.Context, p *Postgres) (string, error) {
	name := fmt.Sprintf("funduq_%d", dbSeq.Add(1))
	if err := p.CreateDatabase(ctx, name); err != nil {
		return "", err
	}
	u := p.URL(name)
	if err := store.Migrate(ctx, u, nil); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	return u, nil
}

// DB is MigratedDB for a test.
func DB(t testing.TB, p *Postgres) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, err := MigratedDB(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// Stuck listens on loopback and accepts every connection, then never reads
// or answers: a store that hangs (frozen, or behind a black-holed route)
// rather than one that refuses, which a client can only give up on by its
// own deadline. It returns host:port; the listener and its connections are
// closed when the test ends.
func Stuck(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}
