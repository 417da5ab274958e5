package agui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.MainWithPools(m)
}

// guard bounds every wait: a hang detector, never a timing assertion.
const guard = 20 * time.Second

// slowGuard is guard for a request whose stream carries megabytes, or
// outlasts a storage give-up, which on a starved machine (load 20 on two
// cores) can take longer than guard without hanging: nodetest's own hang
// detector.
const slowGuard = time.Minute

// doorCfg is the door configuration matching a harness's broker node.
func doorCfg(h *nodetest.Harness) config.Door {
	return config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity}
}

// startDoor serves an AG-UI door on its own connections (its own pool, its
// own Redis client): another door instance, as far as the broker can tell.
func startDoor(t *testing.T, h *nodetest.Harness, mut func(*agui.Options)) *httptest.Server {
	t.Helper()
	return startDoorWith(t, mustDeps(t, h, ""), mut)
}

// mustDeps opens a door's own connections to the harness's stores;
// redisURL, when set, replaces the Redis (an unreachable one, say).
func mustDeps(t *testing.T, h *nodetest.Harness, redisURL string) *door.Deps {
	t.Helper()
	cfg := doorCfg(h)
	if redisURL != "" {
		cfg.RedisURL = redisURL
	}
	deps, err := door.Connect(cfg, door.ConnectOptions{RedisPrefix: h.Prefix, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	return deps
}

func startDoorWith(t *testing.T, deps *door.Deps, mut func(*agui.Options)) *httptest.Server {
	t.Helper()
	return serveDoor(t, deps, mut, nil)
}

// pinnedStep is the step bound startPinnedDoor pins: half of guard, so a
// request's budget (two bounds) is guard, the hang detector's; a healthy
// step on the most starved machine takes a fraction of it.
const pinnedStep = guard / 2

// startPinnedDoor is startDoor with door.Step's bound, and the request
// budgets counted in it, pinned at pinnedStep on every request
// (door.WithStepBound): for a test whose claim is counted within those
// bounds (a transaction's attempts, callers queued behind one row lock,
// a resume's reads), so that a starved machine, which runs each step
// slower, cannot change what it counts (no timed tests).
func startPinnedDoor(t *testing.T, h *nodetest.Harness, mut func(*agui.Options)) *httptest.Server {
	t.Helper()
	return serveDoor(t, mustDeps(t, h, ""), mut, func(ctx context.Context) context.Context {
		return door.WithStepBound(ctx, pinnedStep)
	})
}

// serveDoor serves an AG-UI door on deps; base, when set, derives every
// request's context from the server's.
func serveDoor(t *testing.T, deps *door.Deps, mut func(*agui.Options), base func(context.Context) context.Context) *httptest.Server {
	t.Helper()
	o := agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret,
		Heartbeat: 15 * time.Second, LiveBlock: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		DBCheck: time.Second}
	if mut != nil {
		mut(&o)
	}
	hd, err := agui.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(hd)
	if base != nil {
		srv.Config.BaseContext = func(net.Listener) context.Context { return base(context.Background()) }
	}
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		deps.Close()
	})
	return srv
}

// frame is one SSE message: an event (id, data) or a comment.
type frame struct {
	ID      string
	Data    string
	Comment string
}

func (f frame) event(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(f.Data), &m); err != nil {
		t.Fatalf("event data %q: %v", f.Data, err)
	}
	return m
}

// stream is an open SSE response.
type stream struct {
	t      *testing.T
	resp   *http.Response
	br     *bufio.Reader
	cancel context.CancelFunc
}

// next returns the next frame; ok is false at the end of the stream.
func (s *stream) next() (frame, bool) {
	s.t.Helper()
	var f frame
	seen := false
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			if err != io.EOF && !strings.Contains(err.Error(), "closed") {
				s.t.Fatalf("reading stream: %v", err)
			}
			return f, false
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if seen {
				return f, true
			}
			continue
		}
		seen = true
		switch {
		case strings.HasPrefix(line, ":"):
			f.Comment = strings.TrimSpace(strings.TrimPrefix(line, ":"))
		case strings.HasPrefix(line, "id:"):
			f.ID = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			f.Data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
}

// nextEvent skips comments and returns the next event frame.
func (s *stream) nextEvent() (frame, bool) {
	s.t.Helper()
	for {
		f, ok := s.next()
		if !ok || f.Data != "" {
			return f, ok
		}
	}
}

// rest reads every remaining frame to the end of the stream.
func (s *stream) rest() []frame {
	s.t.Helper()
	var out []frame
	for {
		f, ok := s.next()
		if !ok {
			return out
		}
		out = append(out, f)
	}
}

func (s *stream) close() { s.resp.Body.Close(); s.cancel() }

func events(fs []frame) []frame {
	var out []frame
	for _, f := range fs {
		if f.Data != "" {
			out = append(out, f)
		}
	}
	return out
}

// do sends a request bounded by guard and returns the response.
func do(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, context.CancelFunc) {
	t.Helper()
	return doWithin(t, guard, method, url, body, hdr)
}

// doWithin is do bounded by within (reading the response included).
func doWithin(t *testing.T, within time.Duration, method, url, body string, hdr map[string]string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	return resp, cancel
}

// openStream POSTs (or GETs) and expects 200 text/event-stream.
func openStream(t *testing.T, method, url, body string, hdr map[string]string) *stream {
	t.Helper()
	return openStreamWithin(t, guard, method, url, body, hdr)
}

// openStreamWithin is openStream bounded by within (reading the stream
// included).
func openStreamWithin(t *testing.T, within time.Duration, method, url, body string, hdr map[string]string) *stream {
	t.Helper()
	resp, cancel := doWithin(t, within, method, url, body, hdr)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("%s %s: %d %s: %s", method, url, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &stream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

// jsonCall makes a request expecting a JSON answer and decodes it.
func jsonCall(t *testing.T, method, url, body string, hdr map[string]string) (int, http.Header, map[string]any) {
	t.Helper()
	resp, cancel := do(t, method, url, body, hdr)
	defer cancel()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("%s %s: %d %s, want JSON: %s", method, url, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %v: %s", method, url, err, b)
	}
	return resp.StatusCode, resp.Header, m
}

// input is a RunAgentInput body.
func input(threadID, runID string, extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return fmt.Sprintf(`{"threadId":%q,"runId":%q,"state":{},"messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{}%s}`,
		threadID, runID, extra)
}

func aguiURL(srv *httptest.Server, key, name string) string {
	return srv.URL + "/agui/" + key + "/" + name
}

// runCount counts runs in the database (for "nothing written").
func runCount(t *testing.T, h *nodetest.Harness) int {
	t.Helper()
	var n int
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func threadCount(t *testing.T, h *nodetest.Harness) int {
	t.Helper()
	var n int
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM threads`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// typesOf lists the event types of frames.
func typesOf(t *testing.T, fs []frame) []string {
	t.Helper()
	var out []string
	for _, f := range events(fs) {
		out = append(out, fmt.Sprint(f.event(t)["type"]))
	}
	return out
}

// idsOf lists the SSE ids of frames ("" for synthesized events).
func idsOf(fs []frame) []string {
	var out []string
	for _, f := range events(fs) {
		out = append(out, f.ID)
	}
	return out
}

// doneThread has p serve one turn, sent to url on a new thread, and
// returns the thread's id once that run is completed: a thread that
// exists, with nothing in flight.
func doneThread(t *testing.T, h *nodetest.Harness, p *nodetest.Prov, url string) string {
	t.Helper()
	s := openStream(t, "POST", url, input("t0", "r0", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)
	return *f.ThreadID
}

// echoServed connects provider 0xe1 serving "echo" to h and starts an
// AG-UI door in front of it.
func echoServed(t *testing.T, h *nodetest.Harness) (*nodetest.Prov, *httptest.Server) {
	t.Helper()
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	return p, startDoor(t, h, nil)
}

// takenRun opens a caller's stream of a new run of p's "echo" on a new
// thread, and has p take the run it is offered.
func takenRun(t *testing.T, p *nodetest.Prov, srv *httptest.Server) (*stream, wire.RunFrame) {
	t.Helper()
	return takenRunWithin(t, guard, p, srv)
}

// takenRunWithin is takenRun with the caller's stream bounded by within.
func takenRunWithin(t *testing.T, within time.Duration, p *nodetest.Prov, srv *httptest.Server) (*stream, wire.RunFrame) {
	t.Helper()
	s := openStreamWithin(t, within, "POST", aguiURL(srv, p.Key, "echo"), input("", "", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	return s, f
}
