package intake_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/broker-node/intake"
	"github.com/funduq/funduq-go/core/store"
)

const failedMsg = "intake: listener connection failed"

// (1) A pg_notify on each channel reaches Notify with its kind and run id, in
// order; an empty payload is logged and skipped.
func TestNotifyEachChannel(t *testing.T) {
	db := newTestDB(t)
	rec := newRecorder()
	logger, logs := newLogger(t)
	l := intake.New(db.connect(t), rec, intake.Options{Logger: logger})
	start(t, l)
	rec.waitCatchUp(t, intake.ReasonConnect)

	db.notify(t, store.ChannelRunQueued, "") // skipped
	want := []intake.Notice{
		{Kind: intake.Queued, RunID: "run-queued-1"},
		{Kind: intake.Cancel, RunID: "run-cancel-1"},
		{Kind: intake.Resumed, RunID: "run-resumed-1"},
	}
	for _, n := range want {
		db.notify(t, n.Kind.Channel(), n.RunID)
	}
	for i, w := range want {
		if got := rec.waitNotice(t); got != w {
			t.Fatalf("notice %d: got %+v (%s), want %+v (%s)", i, got, got.Kind, w, w.Kind)
		}
	}
	st := l.Stats()
	if st.Notifications != 3 || st.Skipped != 1 || st.Connects != 1 || st.Reconnects != 0 {
		t.Errorf("stats %+v: want 3 notifications, 1 skipped, 1 connect, 0 reconnects", st)
	}
	skipped := logs.records(t, "intake: notification skipped")
	if len(skipped) != 1 || skipped[0]["channel"] != store.ChannelRunQueued || skipped[0]["why"] != "empty payload" {
		t.Errorf("skip log records: %v", skipped)
	}
}

// (2) CatchUp("connect") runs once LISTEN is active: a NOTIFY committed by
// another connection from inside CatchUp is delivered afterwards. Had the
// LISTENs come after the catch-up, it would have been lost.
func TestCatchUpRunsAfterListen(t *testing.T) {
	db := newTestDB(t)
	rec := newRecorder()
	errs := make(chan error, 1)
	rec.onCatchUp = func(ctx context.Context, reason string) {
		if reason != intake.ReasonConnect {
			return
		}
		_, err := db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, store.ChannelRunQueued, "run-in-catchup")
		errs <- err
	}
	logger, _ := newLogger(t)
	l := intake.New(db.connect(t), rec, intake.Options{Logger: logger})
	start(t, l)

	rec.waitCatchUp(t, intake.ReasonConnect)
	if err := <-errs; err != nil {
		t.Fatalf("notify from CatchUp: %v", err)
	}
	if got, want := rec.waitNotice(t), (intake.Notice{Kind: intake.Queued, RunID: "run-in-catchup"}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// (3) A lost NOTIFY loses no run. The listener's backend is killed; while it
// cannot reconnect a door inserts a run and notifies in one transaction. That
// NOTIFY never arrives, but the reconnect's CatchUp queries the table and
// finds the run.
func TestLostNotifyLosesNoRun(t *testing.T) {
	db := newTestDB(t)
	ctx := context.Background()
	if _, err := db.pool.Exec(ctx, `CREATE TABLE intake_scratch_runs (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}

	// The handler's catch-up is a real query, reported with its reason.
	type catchUp struct {
		reason string
		ids    []string
		err    error
	}
	found := make(chan catchUp, 1000)
	rec := newRecorder()
	rec.onCatchUp = func(ctx context.Context, reason string) {
		rows, err := db.pool.Query(ctx, `SELECT id FROM intake_scratch_runs ORDER BY id`)
		var ids []string
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		found <- catchUp{reason, ids, err}
	}

	// Every connect after the first waits for release, so the test decides
	// how long the listener stays down; redialing says it noticed the loss.
	var calls atomic.Int64
	redialing, release := make(chan struct{}), make(chan struct{})
	var redialOnce sync.Once
	dial := db.connect(t)
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		if calls.Add(1) > 1 {
			redialOnce.Do(func() { close(redialing) })
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return dial(ctx)
	}
	waitFound := func(reason string) catchUp {
		t.Helper()
		timeout := time.After(guard)
		for {
			select {
			case c := <-found:
				if c.err != nil {
					t.Fatalf("catch-up query (%s): %v", c.reason, c.err)
				}
				if c.reason == reason {
					return c
				}
			case <-timeout:
				t.Fatalf("no CatchUp(%q) within %v", reason, guard)
			}
		}
	}

	logger, logs := newLogger(t)
	l := intake.New(connect, rec, intake.Options{Logger: logger})
	start(t, l)
	if c := waitFound(intake.ReasonConnect); len(c.ids) != 0 {
		t.Fatalf("connect catch-up found %v in an empty table", c.ids)
	}

	db.terminateListener(t)
	select {
	case <-redialing:
	case <-time.After(guard):
		t.Fatalf("listener did not try to reconnect within %v of losing its backend", guard)
	}
	db.waitBackends(t, 0) // the listener is down: nothing LISTENs

	// The door, while the listener is down: insert and notify in one tx.
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO intake_scratch_runs (id) VALUES ('run-lost')`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, 'run-lost')`, store.ChannelRunQueued); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	close(release)
	if c := waitFound(intake.ReasonReconnect); !slices.Equal(c.ids, []string{"run-lost"}) {
		t.Fatalf("reconnect catch-up found %v, want [run-lost]", c.ids)
	}

	// The NOTIFY itself is gone: everything delivered up to a sentinel sent
	// after the reconnect excludes it.
	db.notify(t, store.ChannelRunQueued, "sentinel")
	for {
		n := rec.waitNotice(t)
		if n.RunID == "run-lost" {
			t.Fatalf("the NOTIFY sent while disconnected was delivered: %+v", n)
		}
		if n.RunID == "sentinel" {
			break
		}
	}

	st := l.Stats()
	if st.Connects != 2 || st.Reconnects != 1 || st.Failures != 1 {
		t.Errorf("stats %+v: want 2 connects, 1 reconnect, 1 failure", st)
	}
	failed := logs.records(t, failedMsg)
	if len(failed) != 1 || failed[0]["err"] == "" || failed[0]["err"] == nil || failed[0]["attempt"] != 1.0 {
		t.Errorf("failure log records %v: want one with err and attempt=1", failed)
	}
}

// (4) The safety poll calls CatchUp("poll") again and again while healthy.
func TestSafetyPollRepeats(t *testing.T) {
	db := newTestDB(t)
	rec := newRecorder()
	logger, _ := newLogger(t)
	l := intake.New(db.connect(t), rec, intake.Options{PollInterval: 50 * time.Millisecond, Logger: logger})
	start(t, l)
	rec.waitCatchUp(t, intake.ReasonConnect)
	rec.waitCatchUp(t, intake.ReasonPoll)
	rec.waitCatchUp(t, intake.ReasonPoll)
	if st := l.Stats(); st.Polls < 2 || st.Connects != 1 || st.Failures != 0 {
		t.Errorf("stats %+v: want ≥2 polls on one healthy connection", st)
	}
	// Notifications still flow between polls.
	db.notify(t, store.ChannelRunResumed, "run-between-polls")
	if got := rec.waitNotice(t); got != (intake.Notice{Kind: intake.Resumed, RunID: "run-between-polls"}) {
		t.Fatalf("got %+v", got)
	}
}

// (5) Run returns nil promptly after cancel and closes its connection; no
// goroutine survives (TestMain runs goleak over the whole package).
func TestRunStopsOnCancel(t *testing.T) {
	db := newTestDB(t)
	rec := newRecorder()
	logger, _ := newLogger(t)
	l := intake.New(db.connect(t), rec, intake.Options{Logger: logger})
	stop := start(t, l)
	rec.waitCatchUp(t, intake.ReasonConnect)
	if n := db.backends(t); n != 1 {
		t.Fatalf("%d listener backends, want 1", n)
	}
	stop() // fails unless Run returns nil within the guard

	db.waitBackends(t, 0) // the connection was closed

	// The Listener can run again, and says "connect" again.
	start(t, l)
	rec.waitCatchUp(t, intake.ReasonConnect)
}

// Cancelling while the connect func blocks, or during the backoff after a
// failed connect, also ends Run with nil.
func TestRunStopsWhileDisconnected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block bool
	}{{"in connect", true}, {"in backoff", false}} {
		t.Run(tc.name, func(t *testing.T) {
			called := make(chan struct{}, 100)
			connect := func(ctx context.Context) (*pgx.Conn, error) {
				called <- struct{}{}
				if tc.block {
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return nil, errors.New("no database today")
			}
			logger, _ := newLogger(t)
			l := intake.New(connect, newRecorder(), intake.Options{
				Logger: logger, ReconnectMin: time.Hour, ReconnectMax: time.Hour,
			})
			stop := start(t, l)
			select {
			case <-called:
			case <-time.After(guard):
				t.Fatal("connect not called")
			}
			if !tc.block {
				// Wait for the failure to be counted: Run is now sleeping.
				deadline := time.Now().Add(guard)
				for l.Stats().Failures == 0 {
					if time.Now().After(deadline) {
						t.Fatal("failure not counted")
					}
					time.Sleep(time.Millisecond)
				}
			}
			stop()
			if st := l.Stats(); st.Connects != 0 {
				t.Errorf("stats %+v: want no connects", st)
			}
		})
	}
}

// Failed connects are retried with backoff; the count of consecutive
// failures is logged as "attempt", and a first success is still "connect".
func TestConnectRetries(t *testing.T) {
	db := newTestDB(t)
	var calls atomic.Int64
	dial := db.connect(t)
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		if calls.Add(1) <= 2 {
			return nil, errors.New("database warming up")
		}
		return dial(ctx)
	}
	rec := newRecorder()
	logger, logs := newLogger(t)
	l := intake.New(connect, rec, intake.Options{Logger: logger, ReconnectMin: time.Millisecond, ReconnectMax: 4 * time.Millisecond})
	start(t, l)
	rec.waitCatchUp(t, intake.ReasonConnect)

	if st := l.Stats(); st.Failures != 2 || st.Connects != 1 || st.Reconnects != 0 {
		t.Errorf("stats %+v: want 2 failures then 1 connect", st)
	}
	failed := logs.records(t, failedMsg)
	if len(failed) != 2 {
		t.Fatalf("failure log records %v, want 2", failed)
	}
	for i, rec := range failed {
		if rec["attempt"] != float64(i+1) || rec["err"] != "connect: database warming up" || rec["level"] != "WARN" {
			t.Errorf("failure record %d: %v", i, rec)
		}
	}
}

// A silently dead socket (the proxy drops every byte but keeps the TCP
// connection open) is found by the periodic ping, and the listener reconnects.
// Without the ping the wait would hang forever.
func TestPingDetectsDeadSocket(t *testing.T) {
	db := newTestDB(t)
	px := newProxy(t, db.url)
	u := db.listenerURL(t, px.addr())
	connect := func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, u) }

	rec := newRecorder()
	logger, logs := newLogger(t)
	l := intake.New(connect, rec, intake.Options{
		Logger: logger, PingInterval: 50 * time.Millisecond, IOTimeout: 2 * time.Second,
	})
	start(t, l)
	rec.waitCatchUp(t, intake.ReasonConnect)

	px.freeze()
	rec.waitCatchUp(t, intake.ReasonReconnect)
	failed := logs.records(t, failedMsg)
	if len(failed) != 1 {
		t.Fatalf("failure log records %v, want 1", failed)
	}
	if err, _ := failed[0]["err"].(string); len(err) < 5 || err[:5] != "ping:" {
		t.Errorf("failure was %q, want a failed ping", err)
	}

	// pgx's own cleanup of the dead connection (it drains the socket from a
	// goroutine) was ended by the listener, not left to run out its timeout.
	if stuck := logs.records(t, "intake: connection cleanup did not finish"); len(stuck) != 0 {
		t.Errorf("cleanup of the dead connection timed out: %v", stuck)
	}

	// The new connection works.
	db.notify(t, store.ChannelRunCancel, "run-after-freeze")
	if got := rec.waitNotice(t); got != (intake.Notice{Kind: intake.Cancel, RunID: "run-after-freeze"}) {
		t.Fatalf("got %+v", got)
	}
}

// Run refuses to run twice at once.
func TestRunTwiceAtOnce(t *testing.T) {
	db := newTestDB(t)
	rec := newRecorder()
	logger, _ := newLogger(t)
	l := intake.New(db.connect(t), rec, intake.Options{Logger: logger})
	start(t, l)
	rec.waitCatchUp(t, intake.ReasonConnect)
	if err := l.Run(context.Background()); !errors.Is(err, intake.ErrRunning) {
		t.Fatalf("second Run: %v, want ErrRunning", err)
	}
}

// A Run whose context is already done returns nil without connecting.
func TestRunCancelledBeforeStart(t *testing.T) {
	connect := func(context.Context) (*pgx.Conn, error) {
		t.Error("connect called")
		return nil, errors.New("unreachable")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := intake.New(connect, newRecorder(), intake.Options{}).Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
