package scaling

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/procstack"
	"github.com/funduq/funduq-go/provider"
)

// The cluster's settings. Every bound a scenario asserts is derived from
// these (and printed); none is tighter than the spec's own.
const (
	leaseTTL        = 2 * time.Second
	providerGrace   = 3 * time.Second
	deliverTimeout  = 1 * time.Second
	unservedTimeout = 5 * time.Second
	// margin absorbs process scheduling on a loaded 2-core machine (the
	// suite runs beside the rest of go test ./...). It is a hang guard.
	margin = 4 * time.Second
	// afterFailover bounds a caller's stream closing once its run is
	// terminal, across a leader's death: a leader SIGKILLed between a
	// write's commit and its publish leaves those events (or the end) on
	// no live feed, and the door's tail finds them at its next PostgreSQL
	// check (door.DefaultDBCheck; design.md D9).
	afterFailover = margin + door.DefaultDBCheck
	// boot bounds a process becoming live.
	boot = 20 * time.Second
)

const (
	identitySeed = "b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6b6"
	tokenSecret  = "scaling-suite-token-secret-0123456789"
)

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
	bins      procstack.Binaries
	// prefix is the Redis key prefix (FUNDUQ_REDIS_PREFIX) of this test
	// process, shared by its brokers and doors. Scenarios run one after
	// another and every scenario wipes the prefix's keys once its
	// processes are gone.
	prefix string
	// clusterEnv holds extra settings for every process of the next
	// cluster (the chaos test sets them; nil otherwise).
	clusterEnv []string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("broker-node/scaling: the scaling acceptance suite (real processes, faults) is skipped under -short")
		os.Exit(0)
	}
	prefix = fmt.Sprintf("funduqscale:%d:", os.Getpid())
	dir, err := os.MkdirTemp("", "funduq-scaling-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// build compiles the binaries once per test run (procstack.Build: never
// with -race, they are the system under test, not the test).
func build(t testing.TB) {
	t.Helper()
	buildOnce.Do(func() {
		began := time.Now()
		defer func() { fmt.Printf("scaling: built the binaries in %v\n", time.Since(began).Round(time.Millisecond)) }()
		bins, buildErr = procstack.Build(context.Background(), binDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// ---------------------------------------------------------------- processes

// proc is one process of the cluster (procstack.Proc) with the suite's
// ways to fault it, each ending the test when the process does not obey
// within boot.
type proc struct {
	*procstack.Proc
	name, kind, url, logPath string
}

func (p *proc) signal(sig syscall.Signal) { p.Signal(sig) }
func (p *proc) freeze()                   { p.Freeze() }
func (p *proc) thaw()                     { p.Thaw() }
func (p *proc) tail(n int) string         { return p.Tail(n) }
func (p *proc) grep(s string) string      { return p.Grep(s) }

// kill is SIGKILL: no clean-up of any kind.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	p.signal(syscall.SIGKILL)
	p.wait(t, boot)
}

// term is SIGTERM and waits for the process to exit.
func (p *proc) term(t testing.TB) {
	t.Helper()
	p.signal(syscall.SIGTERM)
	p.wait(t, boot)
}

func (p *proc) wait(t testing.TB, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if p.Wait(ctx) != nil {
		t.Fatalf("%s did not exit within %v", p.name, d)
	}
}

// ---------------------------------------------------------------- cluster

type cluster struct {
	t       testing.TB
	dbURL   string
	db      *pgxpool.Pool
	rdb     *redis.Client
	stack   *procstack.Stack
	brokers []*proc
	doors   []*proc
	key     string // funduq's public key (the same on every node)
	http    *http.Client
	procs   []*proc
	of      map[*procstack.Proc]*proc
	logDir  string
}

// newCluster gives a scenario its own database and starts nbrokers broker
// nodes (the first leads) and ndoors door servers.
func newCluster(t testing.TB, nbrokers, ndoors int) *cluster {
	t.Helper()
	dbURL := storetest.URL(t)
	rdb, _ := redistest.Client(t)
	build(t)
	signer, err := identity.NewSignerFromSeedHex(identitySeed)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dbURL: dbURL, db: pool, rdb: rdb, key: signer.PublicKeyHex(),
		http: &http.Client{Timeout: 2 * time.Second}, logDir: t.TempDir(), of: map[*procstack.Proc]*proc{}}
	c.stack, err = procstack.New(procstack.Config{
		Binaries: bins, DatabaseURL: dbURL, RedisURL: redistest.URL(), RedisPrefix: prefix,
		IdentityKey: identitySeed, TokenSecret: tokenSecret,
		Env: append([]string{
			"FUNDUQ_LEASE_TTL=" + leaseTTL.String(), "FUNDUQ_PROVIDER_GRACE=" + providerGrace.String(),
			"FUNDUQ_DELIVER_TIMEOUT=" + deliverTimeout.String(), "FUNDUQ_UNSERVED_TIMEOUT=" + unservedTimeout.String(),
			"FUNDUQ_LOG_LEVEL=debug",
		}, clusterEnv...),
		LogDir: c.logDir, Boot: boot, ProbeTimeout: 400 * time.Millisecond,
		StopGrace: 0, // SIGKILL: a scenario's end cleans nothing up
	})
	if err != nil {
		pool.Close()
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the processes go before the database
	// and the Redis prefix are dropped.
	t.Cleanup(func() {
		c.stack.Close()
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("---- last log lines of %s (%s) ----\n%s", p.name, p.logPath, p.tail(15))
			}
		}
		pool.Close()
		ctx := context.Background()
		var keys []string
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	for i := range nbrokers {
		c.startBroker(fmt.Sprintf("n%d", i+1))
		if i == 0 {
			c.waitLeader(boot)
		}
	}
	for i := range ndoors {
		c.startDoor(fmt.Sprintf("d%d", i+1))
	}
	return c
}

// started records a process the stack started, or ends the test with its
// last log lines.
func (c *cluster) started(sp *procstack.Proc, err error) *proc {
	c.t.Helper()
	if err != nil {
		var pe *procstack.ProcError
		if errors.As(err, &pe) {
			c.t.Fatalf("%v:\n%s", err, procstack.TailFile(pe.Log, 30))
		}
		c.t.Fatal(err)
	}
	p := &proc{Proc: sp, name: sp.Name, kind: string(sp.Kind), url: sp.URL, logPath: sp.LogPath}
	c.procs = append(c.procs, p)
	c.of[sp] = p
	return p
}

// startBroker starts a broker node and waits until it answers /livez.
func (c *cluster) startBroker(name string) *proc {
	c.t.Helper()
	p := c.started(c.stack.StartBroker(context.Background(), name))
	c.brokers = append(c.brokers, p)
	return p
}

// startDoor starts a local doors server and waits until /health is 200.
func (c *cluster) startDoor(name string) *proc {
	c.t.Helper()
	p := c.started(c.stack.StartDoor(context.Background(), name))
	c.doors = append(c.doors, p)
	return p
}

type readyz = procstack.Readyz

func (c *cluster) readyz(p *proc) (readyz, error) {
	return c.stack.Readyz(context.Background(), p.Proc)
}

// leader returns the broker whose /readyz is 200, or nil.
func (c *cluster) leader() *proc {
	return c.of[c.stack.Leader(context.Background())]
}

// waitLeader waits (at most bound) for a leader other than the brokers in
// not, and returns it.
func (c *cluster) waitLeader(bound time.Duration, not ...*proc) *proc {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var ps []*procstack.Proc
	for _, p := range not {
		ps = append(ps, p.Proc)
	}
	l, err := c.stack.WaitLeader(ctx, ps...)
	if err != nil {
		c.t.Fatalf("no new leader within %v", bound)
	}
	return c.of[l]
}

// balancer stands in for the load balancer in front of the broker nodes
// (procstack.Balancer): a request goes to the node whose /readyz is 200,
// or to the first live standby when nobody leads (which then answers 503
// naming the leader or "no leader yet"). WebSocket upgrades pass through.
func (c *cluster) balancer() string {
	c.t.Helper()
	b, err := c.stack.Balancer()
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(b.Close)
	return b.URL
}

// runSDK runs an SDK provider until the test ends (procstack.SDK) and
// returns once it has registered.
func (c *cluster) runSDK(cfg provider.Config) *procstack.SDK {
	c.t.Helper()
	p, err := c.stack.RunSDK(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), boot)
		defer cancel()
		_ = p.Stop(ctx)
	})
	select {
	case <-p.Client.Ready():
	case <-time.After(boot):
		c.t.Fatalf("the SDK provider did not register within %v", boot)
	}
	return p
}

// ---------------------------------------------------------------- storage reads

type runRow struct {
	ID, Status, Reason, Provider string
	Epoch                        int64
	LastSeq                      int
	CancelRequested              bool
}

func (c *cluster) run(id string) runRow {
	c.t.Helper()
	var r runRow
	err := c.db.QueryRow(context.Background(), `SELECT run_id, status, coalesce(failure_reason,''), provider_key,
		coalesce(owner_epoch,0), last_seq, cancel_requested_by IS NOT NULL FROM runs WHERE run_id = $1`, id).
		Scan(&r.ID, &r.Status, &r.Reason, &r.Provider, &r.Epoch, &r.LastSeq, &r.CancelRequested)
	if err != nil {
		c.t.Fatalf("read run %s: %v", id, err)
	}
	return r
}

func (c *cluster) epoch() int64 {
	c.t.Helper()
	var e int64
	if err := c.db.QueryRow(context.Background(), `SELECT coalesce(max(epoch),0) FROM broker_leader`).Scan(&e); err != nil {
		c.t.Fatal(err)
	}
	return e
}

type eventRow struct {
	Seq         int
	ProviderSeq *int64
	Type        string
	Raw         string
}

func (c *cluster) events(id string) []eventRow {
	c.t.Helper()
	rows, err := c.db.Query(context.Background(),
		`SELECT seq, provider_seq, event::text FROM run_events WHERE run_id = $1 ORDER BY seq, id`, id)
	if err != nil {
		c.t.Fatal(err)
	}
	defer rows.Close()
	var out []eventRow
	for rows.Next() {
		var e eventRow
		if err := rows.Scan(&e.Seq, &e.ProviderSeq, &e.Raw); err != nil {
			c.t.Fatal(err)
		}
		e.Type = eventType([]byte(e.Raw))
		out = append(out, e)
	}
	return out
}

func eventType(raw []byte) string {
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &v)
	return v.Type
}

func terminalStatus(s string) bool { return s == "completed" || s == "failed" || s == "cancelled" }

func terminalEvent(typ string) bool { return typ == "RUN_FINISHED" || typ == "RUN_ERROR" }

// waitStatus waits (at most bound) until run id's status satisfies ok.
func (c *cluster) waitStatus(id string, bound time.Duration, what string, ok func(runRow) bool) (runRow, time.Duration) {
	c.t.Helper()
	start := time.Now()
	for {
		r := c.run(id)
		if ok(r) {
			return r, time.Since(start)
		}
		if time.Since(start) > bound {
			c.t.Fatalf("run %s: not %s within %v (status %s %s, epoch %d)", id, what, bound, r.Status, r.Reason, r.Epoch)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) waitTerminal(id string, bound time.Duration) (runRow, time.Duration) {
	c.t.Helper()
	return c.waitStatus(id, bound, "terminal", func(r runRow) bool { return terminalStatus(r.Status) })
}

// checkLedger asserts the failover invariants over the runs' stored
// events: no (run, provider_seq) stored twice, seq contiguous from 1 up to
// the run's last_seq, nothing stored after a terminal event, and a
// terminal run's last event is terminal.
func (c *cluster) checkLedger(ids ...string) {
	c.t.Helper()
	var dups int
	err := c.db.QueryRow(context.Background(), `SELECT count(*) FROM (SELECT run_id, provider_seq FROM run_events
		WHERE provider_seq IS NOT NULL AND run_id = ANY($1) GROUP BY run_id, provider_seq HAVING count(*) > 1) d`, ids).Scan(&dups)
	if err != nil {
		c.t.Fatal(err)
	}
	if dups != 0 {
		c.t.Errorf("%d (run, provider_seq) pairs are stored more than once", dups)
	}
	for _, id := range ids {
		r := c.run(id)
		evs := c.events(id)
		for i, e := range evs {
			if e.Seq != i+1 {
				c.t.Errorf("run %s: event %d has seq %d (not contiguous)", id, i+1, e.Seq)
				break
			}
			if terminalEvent(e.Type) && i != len(evs)-1 {
				c.t.Errorf("run %s: %d events stored after the terminal %s at seq %d", id, len(evs)-1-i, e.Type, e.Seq)
			}
		}
		if len(evs) != r.LastSeq {
			c.t.Errorf("run %s: %d events stored, last_seq %d", id, len(evs), r.LastSeq)
		}
		if terminalStatus(r.Status) && (len(evs) == 0 || !terminalEvent(evs[len(evs)-1].Type)) {
			c.t.Errorf("run %s is %s but its record does not end with a terminal event", id, r.Status)
		}
	}
}

// ---------------------------------------------------------------- doors

// agentsOnline reads GET /agents at door d and reports whether the agent
// (key, name) is online.
func (c *cluster) agentOnline(d *proc, key, name string) bool {
	resp, err := c.http.Get(d.url + "/agents")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var body struct {
		Agents []struct {
			Name        string `json:"name"`
			ProviderKey string `json:"providerKey"`
			Provider    string `json:"provider"`
			Online      bool   `json:"online"`
		} `json:"agents"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(raw, &body) != nil {
		return false
	}
	for _, a := range body.Agents {
		if a.Name == name && (a.ProviderKey == "" || a.ProviderKey == key) && a.Online {
			if a.ProviderKey == "" && !strings.Contains(string(raw), key) {
				continue
			}
			return true
		}
	}
	return false
}

type sseEvent struct {
	ID   int // 0 for an event without an id (the door's RUN_STARTED, a resume's reopening)
	Type string
	Data string
	At   time.Time
}

// stream is one caller's SSE stream from a door.
type stream struct {
	status int
	ctype  string
	body   string // a non-SSE answer
	mu     sync.Mutex
	runID  string
	events []sseEvent
	idCh   chan struct{}
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

var threadN sync.Mutex
var threadSeq int

func newThreadID() string {
	threadN.Lock()
	defer threadN.Unlock()
	threadSeq++
	return fmt.Sprintf("thread-%d-%d", time.Now().UnixNano(), threadSeq)
}

// start POSTs an AG-UI RunAgentInput to door d for agent (key, name) and
// streams the answer.
func (c *cluster) start(d *proc, key, name, text string) *stream {
	c.t.Helper()
	thread := newThreadID()
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":%q}]}`, thread, "caller-"+thread, text)
	s := c.openStream(http.MethodPost, d.url+"/agui/"+key+"/"+name, body, -1)
	s.waitRunID(c.t, margin+deliverTimeout)
	return s
}

// follow opens GET /runs/{id}/events at door d, after seq lastID (no
// Last-Event-ID when lastID < 0).
func (c *cluster) follow(d *proc, id string, lastID int) *stream {
	c.t.Helper()
	s := c.openStream(http.MethodGet, d.url+"/runs/"+id+"/events", "", lastID)
	s.waitRunID(c.t, margin)
	return s
}

func (c *cluster) openStream(method, u, body string, lastID int) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{idCh: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	c.t.Cleanup(func() { cancel(); <-s.done })
	req, _ := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID >= 0 {
		req.Header.Set("Last-Event-ID", fmt.Sprint(lastID))
	}
	go func() {
		defer close(s.done)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.err = err
			return
		}
		defer resp.Body.Close()
		s.status = resp.StatusCode
		s.ctype = resp.Header.Get("Content-Type")
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			s.body = string(b)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, ": funduq run "):
				s.mu.Lock()
				if s.runID == "" {
					s.runID = strings.TrimPrefix(line, ": funduq run ")
					close(s.idCh)
				}
				s.mu.Unlock()
			case strings.HasPrefix(line, "id:"):
				fmt.Sscan(strings.TrimSpace(strings.TrimPrefix(line, "id:")), &ev.ID)
			case strings.HasPrefix(line, "data:"):
				ev.Data += strings.TrimSpace(strings.TrimPrefix(line, "data:"))
			case line == "":
				if ev.Data != "" {
					ev.Type, ev.At = eventType([]byte(ev.Data)), time.Now()
					s.mu.Lock()
					s.events = append(s.events, ev)
					s.mu.Unlock()
				}
				ev = sseEvent{}
			}
		}
		s.err = sc.Err()
	}()
	return s
}

func (s *stream) waitRunID(t testing.TB, bound time.Duration) string {
	t.Helper()
	select {
	case <-s.idCh:
		return s.runID
	case <-s.done:
		select {
		case <-s.idCh:
			return s.runID
		default:
		}
		t.Fatalf("the stream ended before naming its run: status %d %s body %q err %v events %s", s.status, s.ctype, s.body, s.err, describe(s.snapshot()))
	case <-time.After(bound):
		t.Fatalf("the stream named no run within %v", bound)
	}
	return ""
}

func (s *stream) snapshot() []sseEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sseEvent(nil), s.events...)
}

// waitClosed waits (at most bound) for the stream to end and returns its
// events.
func (s *stream) waitClosed(t testing.TB, bound time.Duration) []sseEvent {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(bound):
		t.Fatalf("the stream did not end within %v; got %s", bound, describe(s.snapshot()))
	}
	return s.snapshot()
}

// waitEvents waits (at most bound) until the stream holds n events.
func (s *stream) waitEvents(t testing.TB, n int, bound time.Duration) []sseEvent {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		evs := s.snapshot()
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d events, not %d, after %v: %s", len(evs), n, bound, describe(evs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (s *stream) close() { s.cancel(); <-s.done }

func describe(evs []sseEvent) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d:%s", e.ID, e.Type)
	}
	return "[" + b.String() + "]"
}

// checkStream asserts a caller's view: ids strictly increasing by one
// (after the first id seen, which is from+1), no duplicate, and — when
// wantEnd — a terminal event last.
func checkStream(t testing.TB, what string, evs []sseEvent, from int, wantEnd bool) {
	t.Helper()
	last := from
	for _, e := range evs {
		if e.ID == 0 {
			continue // the door's RUN_STARTED or a resume's reopening (not stored events)
		}
		if e.ID != last+1 {
			t.Errorf("%s: event id %d after %d (gap or duplicate): %s", what, e.ID, last, describe(evs))
			return
		}
		last = e.ID
	}
	if wantEnd && (len(evs) == 0 || !terminalEvent(evs[len(evs)-1].Type)) {
		t.Errorf("%s: the stream ended without a terminal event: %s", what, describe(evs))
	}
}

// ---------------------------------------------------------------- expected failures

// TestXfailRecordsAnExpectedFailure keeps the expected-failure mechanism
// honest while no scenario needs it: a failing check is recorded, not
// reported, and a Fatal inside it ends only the check.
func TestXfailRecordsAnExpectedFailure(t *testing.T) {
	reached := false
	xfail(t, "a check that cannot pass", func(t testing.TB) {
		t.Fatalf("not yet")
		reached = true
	})
	if reached {
		t.Fatal("Fatalf inside an xfail check did not end the check")
	}
}

// xfail runs check, which should pass once the product can do what the
// scenario asks. While it fails, its failure is logged as an EXPECTED FAIL
// with reason and the test passes; once it passes, the test fails, asking
// for the xfail to be removed. The scenario itself is never deleted.
func xfail(t *testing.T, reason string, check func(t testing.TB)) {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				r.mu.Lock()
				r.failed = true
				r.msgs = append(r.msgs, fmt.Sprint("panic: ", p))
				r.mu.Unlock()
			}
		}()
		check(r)
	}()
	<-done
	if r.skipped {
		t.Skip(strings.Join(r.msgs, "; "))
	}
	if r.Failed() {
		t.Logf("EXPECTED FAIL: %s\n  observed: %s", reason, strings.Join(r.msgs, "\n  observed: "))
		return
	}
	t.Errorf("now passes: remove the xfail (%s)", reason)
}

// recorder is a testing.TB whose failures are recorded rather than
// reported; FailNow and Skip end the check's goroutine.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	failed  bool
	skipped bool
	msgs    []string
}

func (r *recorder) fail(msg string) {
	r.mu.Lock()
	r.failed = true
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
}
func (r *recorder) Fail()                     { r.fail("failed") }
func (r *recorder) Error(args ...any)         { r.fail(fmt.Sprint(args...)) }
func (r *recorder) Errorf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)) }
func (r *recorder) FailNow()                  { r.fail("FailNow"); runtimeGoexit() }
func (r *recorder) Fatal(args ...any)         { r.fail(fmt.Sprint(args...)); runtimeGoexit() }
func (r *recorder) Fatalf(f string, a ...any) { r.fail(fmt.Sprintf(f, a...)); runtimeGoexit() }
func (r *recorder) Failed() bool              { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }
func (r *recorder) Skip(args ...any)          { r.skip(fmt.Sprint(args...)) }
func (r *recorder) Skipf(f string, a ...any)  { r.skip(fmt.Sprintf(f, a...)) }
func (r *recorder) SkipNow()                  { r.skip("skipped") }
func (r *recorder) skip(msg string) {
	r.mu.Lock()
	r.skipped = true
	r.msgs = append(r.msgs, msg)
	r.mu.Unlock()
	runtimeGoexit()
}

// ---------------------------------------------------------------- misc

// until polls cond every 10 ms for at most bound and reports whether it
// came true, and when.
func until(bound time.Duration, cond func() bool) (bool, time.Duration) {
	start := time.Now()
	for {
		if cond() {
			return true, time.Since(start)
		}
		if time.Since(start) > bound {
			return false, time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ttlMultiple(d time.Duration) string {
	return fmt.Sprintf("%.2f s = %.2f × TTL", d.Seconds(), d.Seconds()/leaseTTL.Seconds())
}
