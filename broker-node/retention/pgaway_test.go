package retention_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/broker-node/retention"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/internal/syncbuf"
	"github.com/funduq/funduq-go/internal/testservers"
)

// onLog is a slog handler that calls hook (once) when a record with msg
// is handled, after writing it: a test's barrier on what the pass says.
type onLog struct {
	slog.Handler
	msg  string
	once *sync.Once
	hook func()
}

func (h onLog) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Message == h.msg {
		h.once.Do(h.hook)
	}
	return err
}

func (h onLog) WithAttrs(a []slog.Attr) slog.Handler {
	return onLog{h.Handler.WithAttrs(a), h.msg, h.once, h.hook}
}

func (h onLog) WithGroup(g string) slog.Handler {
	return onLog{h.Handler.WithGroup(g), h.msg, h.once, h.hook}
}

// PostgreSQL going away in the middle of a pass, inside a batch that has
// deleted some of its rows: the pass fails, counted and logged as a
// failure; the batches committed before it stay deleted, the one cut off
// deletes nothing; once PostgreSQL is back the next pass deletes the rest.
func TestPassWhenPostgresGoesAwayMidBatch(t *testing.T) {
	pg := testservers.PG(t)
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "retention"); err != nil {
		t.Fatal(err)
	}
	url := pg.URL("retention")
	if err := store.Migrate(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ids := Seed(t, st, 25, time.Now().Add(-31*24*time.Hour))

	// After the first batch commits, the test holds run_events, so the
	// second batch waits there having deleted nothing it can commit.
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	held := make(chan struct{})
	var holdErr error
	logs := &syncbuf.Buffer{}
	c := &retention.Cleaner{Store: st, Retention: 720 * time.Hour, Batch: 10, Metrics: retention.NewMetrics(nil),
		Log: slog.New(onLog{Handler: slog.NewJSONHandler(logs, nil), msg: "retention deleted settled runs", once: &sync.Once{},
			hook: func() {
				_, holdErr = holder.Exec(ctx, `BEGIN; LOCK TABLE run_events IN ACCESS EXCLUSIVE MODE`)
				close(held)
			}})}
	done := make(chan error, 1)
	go func() {
		_, err := c.Pass(ctx)
		done <- err
	}()
	<-held
	if holdErr != nil {
		t.Fatalf("hold run_events: %v", holdErr)
	}
	for waiting := false; !waiting; {
		// Read on a connection of its own: pg_stat_activity is read once
		// per transaction, and the holder's stays open.
		if err := st.Pool().QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%DELETE FROM run_events%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the pass ended (%v) before its second batch waited on run_events; logs: %s", err, logs.String())
		default:
		}
		time.Sleep(5 * time.Millisecond) // polling a barrier, not timing an assertion
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the pass PostgreSQL went away under reported success")
	}
	if got := value(c.Metrics.Errors); got != 1 {
		t.Errorf("errors metric %v, want 1", got)
	}
	if !strings.Contains(logs.String(), `"msg":"retention batch failed"`) {
		t.Errorf("the failure was not logged: %s", logs.String())
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	// The pool's connections from before the restart are dead; it finds
	// that out by pinging one idle over a second, as the next pass, an
	// Interval later, would have it. The test's reads use one of its own.
	st.Pool().Reset()
	check, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close(ctx)
	left := func() (n int) {
		t.Helper()
		if err := check.QueryRow(ctx, `SELECT count(*) FROM runs WHERE run_id = ANY($1)`, ids).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Whole batches only: the cut-off one rolled back (15 left), or —
	// when the shutdown ended the test's session, and with it the lock,
	// before the batch's — committed whole and the next was refused (5).
	// Every run left keeps its events and its thread.
	n := left()
	if n != 15 && n != 5 {
		t.Fatalf("%d runs left once PostgreSQL is back, want whole batches of 10 deleted", n)
	}
	var broken int
	if err := check.QueryRow(ctx, `SELECT count(*) FROM runs r WHERE r.run_id = ANY($1)
		AND (NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = r.run_id)
		     OR NOT EXISTS (SELECT 1 FROM threads t WHERE t.thread_id = r.thread_id))`, ids).Scan(&broken); err != nil || broken != 0 {
		t.Fatalf("%d runs left without their events or thread (%v)", broken, err)
	}
	p, err := c.Pass(ctx)
	if err != nil || p.Runs != int64(n) || p.Threads != int64(n) || left() != 0 {
		t.Fatalf("the next pass: %+v %v, %d left", p, err, left())
	}
}
