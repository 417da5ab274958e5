package outage_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/internal/testservers"
)

// quiet drops go-redis's own log lines (every failed dial while Redis is
// down); the outcome is what the tests assert.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	leaktest.MainWithPools(m)
}

// guard bounds every wait: a hang detector, never a timing assertion.
const guard = 30 * time.Second

const prefix = "funduq:"

// env is one broker node (optional) and one door server on a private
// PostgreSQL and a private Redis that the test may take away.
type env struct {
	t     *testing.T
	pg    *testservers.Postgres
	rs    *testservers.Redis
	dbURL string
	h     *nodetest.Harness // nil without a broker
	deps  *door.Deps
	door  string
	exits sync.Map // request id → handlerExit
	reqN  atomic.Int64
}

// handlerExit is how a door handler returned: the status it wrote and
// whether its request's context had ended by then (the client giving up).
type handlerExit struct {
	status int
	ctxErr error
}

func setup(t *testing.T, broker bool, mut func(*config.Broker)) *env {
	t.Helper()
	e := &env{t: t, pg: testservers.PG(t), rs: testservers.RedisServer(t)}
	e.dbURL = testservers.DB(t, e.pg)
	if broker {
		e.h = nodetest.StartOn(t, e.dbURL, e.rs.URL(), prefix, mut, nil)
	}
	deps, err := door.Connect(config.Door{
		Storage:  config.Storage{DatabaseURL: e.dbURL, RedisURL: e.rs.URL(), RedisPrefix: prefix},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, door.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deps.Close)
	e.deps = deps
	ag, err := agui.New(agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range agui.Patterns() {
		mux.Handle(p, ag)
	}
	mux.Handle("GET /agents", door.Agents(deps.Store, nil, deps.Limits.AgentsHiddenAfter))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rw := &recorder{ResponseWriter: w}
		mux.ServeHTTP(rw, r)
		if id := r.Header.Get("X-Test-Request"); id != "" {
			e.exits.Store(id, handlerExit{status: rw.status, ctxErr: r.Context().Err()})
		}
	}))
	t.Cleanup(srv.Close)
	e.door = srv.URL
	return e
}

type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// answer is one door answer the test waited for.
type answer struct {
	status     int
	retryAfter string
	code       string // the error envelope's code
	exit       handlerExit
	took       time.Duration // reported, never asserted
}

// hang is the test's own bound on a door answer. It is far beyond the
// door's storage bounds: if it fires, the door hung.
var hang = &http.Client{Timeout: guard}

// ask sends one request and returns the door's answer and how its handler
// returned.
func (e *env) ask(method, path, body string) answer {
	e.t.Helper()
	id := strconv.FormatInt(e.reqN.Add(1), 10)
	req, err := http.NewRequest(method, e.door+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-Test-Request", id)
	req.Header.Set("Content-Type", "application/json")
	began := time.Now()
	resp, err := hang.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: no answer from the door within the test's hang guard: %v", method, path, err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), took: time.Since(began)}
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &env)
	a.code = env.Error.Code
	// The handler records its exit after it returns, which is after the
	// client read the whole answer only in the common case: wait for it.
	deadline := time.Now().Add(guard)
	for {
		if v, ok := e.exits.Load(id); ok {
			a.exit = v.(handlerExit)
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s %s: the handler did not return", method, path)
		}
		time.Sleep(time.Millisecond)
	}
	return a
}

// unavailable asserts the door's outage answer: 503, Retry-After, the one
// envelope with storage_unavailable, written by a handler that returned on
// its own (its request was still live when it did).
func (e *env) unavailable(what string, a answer) answer {
	e.t.Helper()
	if a.status != http.StatusServiceUnavailable || a.retryAfter == "" || a.code != door.CodeUnavailable {
		e.t.Fatalf("%s: answered %d Retry-After %q code %q; want 503, Retry-After, %s", what, a.status, a.retryAfter, a.code, door.CodeUnavailable)
	}
	if a.exit.ctxErr != nil {
		e.t.Fatalf("%s: the handler returned only because its request ended (%v), not by its own bound", what, a.exit.ctxErr)
	}
	return a
}

// ---------------------------------------------------------------- SSE

type sseEvent struct {
	ID   int
	Type string
	Data string
}

type stream struct {
	mu     sync.Mutex
	runID  string
	idCh   chan struct{}
	events []sseEvent
	done   chan struct{}
	status int
	err    error
	cancel context.CancelFunc
}

func (e *env) open(method, path, body string, lastID int) *stream {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{idCh: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	e.t.Cleanup(func() { cancel(); <-s.done })
	req, _ := http.NewRequestWithContext(ctx, method, e.door+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID >= 0 {
		req.Header.Set("Last-Event-ID", strconv.Itoa(lastID))
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
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<22)
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
				ev.ID, _ = strconv.Atoi(strings.TrimSpace(line[3:]))
			case strings.HasPrefix(line, "data:"):
				ev.Data += strings.TrimSpace(line[5:])
			case line == "":
				if ev.Data != "" {
					var v struct {
						Type string `json:"type"`
					}
					_ = json.Unmarshal([]byte(ev.Data), &v)
					ev.Type = v.Type
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

// post starts a run of agent (key, name) at the door and waits until the
// door names it (the run is acknowledged).
func (e *env) post(key, name, text string) (*stream, string) {
	e.t.Helper()
	thread := fmt.Sprintf("t-%d", time.Now().UnixNano())
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":%q}]}`, thread, "c-"+thread, text)
	s := e.open(http.MethodPost, "/agui/"+key+"/"+name, body, -1)
	select {
	case <-s.idCh:
	case <-s.done:
		e.t.Fatalf("POST ended before naming its run: status %d err %v", s.status, s.err)
	case <-time.After(guard):
		e.t.Fatal("POST named no run")
	}
	return s, s.runID
}

func (s *stream) snapshot() []sseEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sseEvent(nil), s.events...)
}

func (s *stream) waitEvents(t *testing.T, n int) []sseEvent {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		if evs := s.snapshot(); len(evs) >= n {
			return evs
		}
		select {
		case <-s.done:
			t.Fatalf("the stream ended with %d events, want %d: %s (err %v)", len(s.snapshot()), n, describe(s.snapshot()), s.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream holds %d events, want %d", len(s.snapshot()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *stream) waitClosed(t *testing.T) []sseEvent {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(guard):
		t.Fatalf("the stream did not end: %s", describe(s.snapshot()))
	}
	return s.snapshot()
}

func describe(evs []sseEvent) string {
	var b strings.Builder
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d:%s", e.ID, e.Type)
	}
	return "[" + b.String() + "]"
}

// checkStream asserts a caller saw ids from+1, from+2, … once each, in
// order, ending with a terminal event, and returns the stored ids seen.
func checkStream(t *testing.T, what string, evs []sseEvent, from int) {
	t.Helper()
	last := from
	for _, e := range evs {
		if e.ID == 0 {
			continue // the door's RUN_STARTED or a resume's reopening: not a stored event
		}
		if e.ID != last+1 {
			t.Fatalf("%s: id %d after %d (a gap or a repeat): %s", what, e.ID, last, describe(evs))
		}
		last = e.ID
	}
	if len(evs) == 0 || (evs[len(evs)-1].Type != "RUN_FINISHED" && evs[len(evs)-1].Type != "RUN_ERROR") {
		t.Fatalf("%s: the stream did not end with a terminal event: %s", what, describe(evs))
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
