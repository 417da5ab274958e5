// Package pgwatch records, for tests, every call a PostgreSQL pool makes —
// each acquire, query and pipelined batch: its SQL, when it started, the
// deadline its context gave it and how it ended. How long a door lets one
// storage call wait is that deadline less that start, read without a clock
// (design.md §Doors under storage faults), and a Proxy in front of the pool
// makes a call meet a hung server at the statement the test picks.
package pgwatch

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/internal/testservers"
)

// Call is one recorded call.
type Call struct {
	// SQL is the statement; a batch's are joined by "; ", an acquire's
	// is "(acquire)".
	SQL string
	// Args are a query's arguments (none for a batch or an acquire).
	Args     []any
	Start    time.Time
	Deadline time.Time // zero: the context had none
	Ended    bool
	Err      error
}

// Bound is how long the call's context let it wait from its start; false
// when it had no deadline.
func (c Call) Bound() (time.Duration, bool) {
	if c.Deadline.IsZero() {
		return 0, false
	}
	return c.Deadline.Sub(c.Start), true
}

func (c Call) String() string {
	b, ok := c.Bound()
	bound := "no deadline"
	if ok {
		bound = "bound " + b.Round(time.Millisecond).String()
	}
	end := "running"
	if c.Ended {
		end = "ok"
		if c.Err != nil {
			end = c.Err.Error()
		}
	}
	return strconv.Quote(abbrev(c.SQL)) + " (" + bound + "; " + end + ")"
}

func abbrev(sql string) string {
	sql = strings.Join(strings.Fields(sql), " ")
	if len(sql) > 90 {
		return sql[:90] + "…"
	}
	return sql
}

// Watch records calls; it is the pool's tracer.
type Watch struct {
	mu      sync.Mutex
	calls   []*Call
	onStart func(sql string)
}

// OnStart sets f to run as each call starts, with its SQL, before anything
// of it is sent (a test freezes its proxy there); nil clears it.
func (w *Watch) OnStart(f func(sql string)) {
	w.mu.Lock()
	w.onStart = f
	w.mu.Unlock()
}

// Len is how many calls have started: a mark for Since.
func (w *Watch) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.calls)
}

// Since returns the calls started after mark, as they stand.
func (w *Watch) Since(mark int) []Call {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Call, 0, len(w.calls)-mark)
	for _, c := range w.calls[mark:] {
		out = append(out, *c)
	}
	return out
}

type callKey struct{}

func (w *Watch) start(ctx context.Context, sql string, args ...any) context.Context {
	c := &Call{SQL: sql, Args: args, Start: time.Now()}
	c.Deadline, _ = ctx.Deadline()
	w.mu.Lock()
	w.calls = append(w.calls, c)
	f := w.onStart
	w.mu.Unlock()
	if f != nil {
		f(sql)
	}
	return context.WithValue(ctx, callKey{}, c)
}

func (w *Watch) end(ctx context.Context, err error) {
	c, _ := ctx.Value(callKey{}).(*Call)
	if c == nil {
		return
	}
	w.mu.Lock()
	c.Ended, c.Err = true, err
	w.mu.Unlock()
}

// TraceQueryStart implements pgx.QueryTracer.
func (w *Watch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return w.start(ctx, d.SQL, d.Args...)
}

// TraceQueryEnd implements pgx.QueryTracer.
func (w *Watch) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	w.end(ctx, d.Err)
}

// TraceBatchStart implements pgx.BatchTracer.
func (w *Watch) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	if d.Batch != nil {
		for _, q := range d.Batch.QueuedQueries {
			sqls = append(sqls, q.SQL)
		}
	}
	return w.start(ctx, strings.Join(sqls, "; "))
}

// TraceBatchQuery implements pgx.BatchTracer.
func (w *Watch) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (w *Watch) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchEndData) {
	w.end(ctx, d.Err)
}

// TraceAcquireStart implements pgxpool.AcquireTracer.
func (w *Watch) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return w.start(ctx, "(acquire)")
}

// TraceAcquireEnd implements pgxpool.AcquireTracer.
func (w *Watch) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, d pgxpool.TraceAcquireEndData) {
	w.end(ctx, d.Err)
}

// Open opens a pool on dbURL as a door's (application_name funduq-door, at
// most maxConns connections) whose connections pass through a Proxy the
// test may freeze and whose calls the returned Watch records. The pool is
// the caller's to close; the proxy closes when the test ends.
func Open(t testing.TB, dbURL string, maxConns int32) (*pgxpool.Pool, *Watch, *testservers.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.ConnConfig
	px := testservers.NewProxy(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	host, port, _ := net.SplitHostPort(px.Addr)
	p, _ := strconv.Atoi(port)
	cc.Host, cc.Port, cc.Fallbacks = host, uint16(p), nil
	cc.RuntimeParams["application_name"] = "funduq-door"
	// As door.Connect bounds a new connection (door.ConnectTimeout): one
	// dialled while the proxy is frozen gives up, so the pool can close.
	cc.ConnectTimeout = 1500 * time.Millisecond
	w := &Watch{}
	cc.Tracer = w
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool, w, px
}

// OpenStore is Open wrapped in a store.Store (what a door is given): the
// store closes when the test ends, after the proxy — a connection given up
// mid-call would otherwise wait on its cancel request through a frozen
// proxy.
func OpenStore(t testing.TB, dbURL string, maxConns int32) (*store.Store, *Watch, *testservers.Proxy) {
	t.Helper()
	pool, w, px := Open(t, dbURL, maxConns)
	st := store.New(pool, nil)
	t.Cleanup(st.Close)
	t.Cleanup(px.Close)
	return st, w, px
}

// CheckBounded fails t for each call whose context let it wait longer than
// bound from its start, or for ever.
func CheckBounded(t testing.TB, calls []Call, bound time.Duration) {
	t.Helper()
	for _, c := range Unbounded(calls, bound) {
		t.Errorf("storage call %v: given more than one storage bound (%v) to wait", c, bound)
	}
}

// CheckOneBoundSpent checks the storage calls of a request answered after
// it met a hung PostgreSQL at the call hung selects: each call was given
// at most bound from its start (CheckBounded), and the hung call alone
// ended in an error.
func CheckOneBoundSpent(t testing.TB, calls []Call, bound time.Duration, hung func(sql string) bool) {
	t.Helper()
	CheckBounded(t, calls, bound)
	if failed := Failed(calls); len(failed) != 1 || !hung(failed[0].SQL) {
		t.Errorf("calls that failed: %v; want the frozen one alone (all the request's: %v)", failed, calls)
	}
}

// Unbounded returns the calls whose context let them wait longer than most
// from their start, or for ever.
func Unbounded(calls []Call, most time.Duration) []Call {
	var out []Call
	for _, c := range calls {
		if b, ok := c.Bound(); !ok || b > most {
			out = append(out, c)
		}
	}
	return out
}

// Failed returns the calls that ended in an error.
func Failed(calls []Call) []Call {
	var out []Call
	for _, c := range calls {
		if c.Ended && c.Err != nil {
			out = append(out, c)
		}
	}
	return out
}
