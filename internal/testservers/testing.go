package testservers

import (
	"bytes"
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

// Stuck listens on loopback and accepts every connection, then never
// answers: a store that hangs (frozen, or behind a black-holed route)
// rather than one that refuses, which a client can only give up on by its
// own deadline. It returns host:port; the listener and its connections are
// closed when the test ends.
func Stuck(t testing.TB) string {
	t.Helper()
	return Hang(t, "").Addr
}

// Hung is Stuck with its barrier and its release in the test's hands.
type Hung struct {
	// Addr is the listener's host:port.
	Addr string
	// Reached is closed once a client has connected (want "") or has sent
	// bytes holding want (compared in lower case): the client is then
	// waiting on the hung server.
	Reached <-chan struct{}

	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
	once  sync.Once
	wg    sync.WaitGroup
}

// Hang starts a Hung server; Release runs when the test ends, or earlier
// when the test calls it (to let a client stuck on it go).
func Hang(t testing.TB, want string) *Hung {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reached := make(chan struct{})
	h := &Hung{Addr: ln.Addr().String(), Reached: reached, ln: ln, done: make(chan struct{})}
	var first sync.Once
	hit := func() { first.Do(func() { close(reached) }) }
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Release
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			if want == "" {
				hit()
			}
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				// Read what the client sends (never answering) until the
				// connection is closed.
				var got []byte
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if want == "" {
						continue
					}
					if got = append(got, buf[:n]...); bytes.Contains(bytes.ToLower(got), []byte(want)) {
						hit()
					}
				}
			}()
		}
	}()
	t.Cleanup(h.Release)
	return h
}

// Release closes the listener and every connection: clients waiting on
// the server get an error at once.
func (h *Hung) Release() {
	h.once.Do(func() {
		h.ln.Close()
		<-h.done
		h.mu.Lock()
		for _, c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
}
