package intake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/funduq/funduq-go/broker-node/intake"
	"github.com/funduq/funduq-go/core/store/storetest"

	"github.com/funduq/funduq-go/internal/syncbuf"
)

// guard bounds every wait. It is a hang detector, not a timing assertion.
const guard = 10 * time.Second

var appSeq atomic.Int64

// testDB is a fresh database for one test: its URL, a pool for the test's
// own statements (the "door" side), and a distinctive application_name for
// the listener's connections.
type testDB struct {
	url  string
	pool *pgxpool.Pool
	app  string
}

func newTestDB(t *testing.T) *testDB {
	t.Helper()
	u := storetest.URL(t)
	pool, err := pgxpool.New(context.Background(), u)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return &testDB{url: u, pool: pool, app: fmt.Sprintf("intake-test-%d-%d", time.Now().UnixNano(), appSeq.Add(1))}
}

// listenerURL is the database URL with the listener's application_name and,
// if hostport is not empty, another address (a proxy).
func (db *testDB) listenerURL(t *testing.T, hostport string) string {
	t.Helper()
	u, err := url.Parse(db.url)
	if err != nil {
		t.Fatalf("parse %q: %v", db.url, err)
	}
	q := u.Query()
	q.Set("application_name", db.app)
	u.RawQuery = q.Encode()
	if hostport != "" {
		u.Host = hostport
	}
	return u.String()
}

// connect returns a connect func opening a fresh connection on every call.
func (db *testDB) connect(t *testing.T) func(context.Context) (*pgx.Conn, error) {
	u := db.listenerURL(t, "")
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, u) }
}

// notify does what a door does: pg_notify in its own committed transaction.
func (db *testDB) notify(t *testing.T, channel, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if _, err := db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		t.Fatalf("pg_notify(%s, %q): %v", channel, payload, err)
	}
}

// terminateListener kills the listener's backend and checks exactly one was
// found by its application_name.
func (db *testDB) terminateListener(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	rows, err := db.pool.Query(ctx,
		`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, db.app)
	if err != nil {
		t.Fatalf("terminate: %v", err)
	}
	killed, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		t.Fatalf("terminate: %v", err)
	}
	if len(killed) != 1 || !killed[0] {
		t.Fatalf("terminate: want exactly one listener backend killed, got %v", killed)
	}
}

// backends counts the listener's live backends.
func (db *testDB) backends(t *testing.T) int {
	t.Helper()
	var n int
	err := db.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, db.app).Scan(&n)
	if err != nil {
		t.Fatalf("count backends: %v", err)
	}
	return n
}

// waitBackends waits until the listener has want live backends. A killed or
// closed backend leaves pg_stat_activity shortly after the client sees it go.
func (db *testDB) waitBackends(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		n := db.backends(t)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listener backends after %v, want %d", n, guard, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorder is a Handler that reports every call on channels. onCatchUp, if
// set, runs inside CatchUp before the call is reported.
type recorder struct {
	notices   chan intake.Notice
	catchups  chan string
	onCatchUp func(ctx context.Context, reason string)
}

func newRecorder() *recorder {
	return &recorder{notices: make(chan intake.Notice, 1000), catchups: make(chan string, 1000)}
}

func (r *recorder) Notify(ctx context.Context, n intake.Notice) {
	select {
	case r.notices <- n:
	case <-ctx.Done():
	}
}

func (r *recorder) CatchUp(ctx context.Context, reason string) {
	if r.onCatchUp != nil {
		r.onCatchUp(ctx, reason)
	}
	select {
	case r.catchups <- reason:
	case <-ctx.Done():
	}
}

// waitCatchUp waits for a CatchUp with reason want, passing over polls.
func (r *recorder) waitCatchUp(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(guard)
	for {
		select {
		case got := <-r.catchups:
			if got == want {
				return
			}
			if got != intake.ReasonPoll {
				t.Fatalf("CatchUp(%q) while waiting for CatchUp(%q)", got, want)
			}
		case <-timeout:
			t.Fatalf("no CatchUp(%q) within %v", want, guard)
		}
	}
}

func (r *recorder) waitNotice(t *testing.T) intake.Notice {
	t.Helper()
	select {
	case n := <-r.notices:
		return n
	case <-time.After(guard):
		t.Fatalf("no Notify within %v", guard)
		return intake.Notice{}
	}
}

// start runs l until the returned stop is called (or the test ends). stop
// cancels Run and fails the test unless Run returns nil.
func start(t *testing.T, l *intake.Listener) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v after cancel, want nil", err)
				}
			case <-time.After(guard):
				t.Fatalf("Run did not return within %v of cancel", guard)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// logBuffer collects the JSON log lines of a Listener.
type logBuffer struct{ syncbuf.Buffer }

func newLogger(t *testing.T) (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("listener log:\n%s", b.String())
		}
	})
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// records returns the decoded log records whose msg is msg.
func (b *logBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}
