package a2a_test

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
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.MainWithPools(m)
}

// guard bounds every wait: a hang detector, never a timing assertion.
const guard = 20 * time.Second

// slowGuard is guard for a stream that outlasts a storage give-up, which
// on a starved machine (load 20 on two cores) can take longer than guard
// without hanging: nodetest's own hang detector.
const slowGuard = time.Minute

// pinnedStep is the step bound startPinnedDoor pins: half of guard, so a
// request's budget of two bounds is guard, the hang detector's; a healthy
// step on the most starved machine takes a fraction of it.
const pinnedStep = guard / 2

func doorDeps(t *testing.T, h *nodetest.Harness) *door.Deps { return doorDepsOn(t, h, "") }

// doorDepsOn opens a door's connections; redisURL, when set, replaces the
// harness's Redis URL (one naming its clients, say).
func doorDepsOn(t *testing.T, h *nodetest.Harness, redisURL string) *door.Deps {
	t.Helper()
	st := h.Cfg.Storage
	if redisURL != "" {
		st.RedisURL = redisURL
	}
	deps, err := door.Connect(config.Door{Storage: st, Identity: h.Cfg.Identity},
		door.ConnectOptions{RedisPrefix: h.Prefix, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	return deps
}

// startDoor serves an A2A door on its own connections.
func startDoor(t *testing.T, h *nodetest.Harness, mut func(*a2a.Options)) *httptest.Server {
	t.Helper()
	return startDoorWith(t, doorDeps(t, h), mut)
}

// startDoorOn serves an A2A door whose Redis clients use redisURL.
func startDoorOn(t *testing.T, h *nodetest.Harness, redisURL string) *httptest.Server {
	t.Helper()
	return startDoorWith(t, doorDepsOn(t, h, redisURL), nil)
}

func startDoorWith(t *testing.T, deps *door.Deps, mut func(*a2a.Options)) *httptest.Server {
	t.Helper()
	return serveDoor(t, deps, mut, nil)
}

// startPinnedDoor is startDoor with door.Step's bound, and the request
// budgets counted in it, pinned at pinnedStep on every request
// (door.WithStepBound): for a test whose claim is counted within those
// bounds (a transaction's attempts, callers queued behind one row lock),
// so that a starved machine, which runs each step slower, cannot change
// what it counts (no timed tests; design.md §Doors under storage faults).
func startPinnedDoor(t *testing.T, h *nodetest.Harness, mut func(*a2a.Options)) *httptest.Server {
	t.Helper()
	return serveDoor(t, doorDeps(t, h), mut, func(ctx context.Context) context.Context {
		return door.WithStepBound(ctx, pinnedStep)
	})
}

// serveDoor serves an A2A door on deps; base, when set, derives every
// request's context from the server's.
func serveDoor(t *testing.T, deps *door.Deps, mut func(*a2a.Options), base func(context.Context) context.Context) *httptest.Server {
	t.Helper()
	o := a2a.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq, TokenSecret: deps.TokenSecret,
		Tail: door.TailOptions{Heartbeat: 15 * time.Second, LiveBlock: 500 * time.Millisecond,
			PollInterval: 50 * time.Millisecond, DBCheck: time.Second}}
	if mut != nil {
		mut(&o)
	}
	hd, err := a2a.New(o)
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

func signer(t *testing.T, b byte) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(b))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func chainOf(t *testing.T, s *identity.Signer) []string {
	t.Helper()
	hop, err := identity.SignHop(s, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return []string{hop.Token}
}

// client speaks JSON-RPC to one agent's endpoint in one protocol version.
type client struct {
	t       *testing.T
	url     string
	version string // "" (0.3 by default) or "1.0"
	n       int
	// within bounds each request, reading its response or stream
	// included; guard when zero.
	within time.Duration
}

func newClient(t *testing.T, srv *httptest.Server, key, name, version string) *client {
	return &client{t: t, url: srv.URL + "/a2a/" + key + "/" + name, version: version}
}

// body is a JSON-RPC request.
func (c *client) body(method string, params any) string {
	c.n++
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.n, "method": method, "params": params})
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}

func (c *client) post(body string, hdr map[string]string) (*http.Response, context.CancelFunc) {
	c.t.Helper()
	resp, cancel, err := c.tryPost(body, hdr)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp, cancel
}

// tryPost is post returning its error, for callers on goroutines other
// than the test's, where t.Fatal would end only that goroutine.
func (c *client) tryPost(body string, hdr map[string]string) (*http.Response, context.CancelFunc, error) {
	within := guard
	if c.within > 0 {
		within = c.within
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		cancel()
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.version != "" {
		req.Header.Set(a2a.VersionHeader, c.version)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return resp, cancel, nil
}

// rpcResp is a decoded JSON-RPC response.
type rpcResp struct {
	Status int
	ID     any            `json:"id"`
	Result map[string]any `json:"result"`
	Error  *struct {
		Code    int            `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
}

func (c *client) rawCall(body string, hdr map[string]string) rpcResp {
	c.t.Helper()
	r, err := c.tryRawCall(body, hdr)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// tryRawCall is rawCall returning its error, for calls made on goroutines
// other than the test's.
func (c *client) tryRawCall(body string, hdr map[string]string) (rpcResp, error) {
	resp, cancel, err := c.tryPost(body, hdr)
	if err != nil {
		return rpcResp{}, err
	}
	defer cancel()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r rpcResp
	if err := json.Unmarshal(b, &r); err != nil {
		return rpcResp{}, fmt.Errorf("response %d %q: %w", resp.StatusCode, b, err)
	}
	r.Status = resp.StatusCode
	return r, nil
}

func (c *client) call(method string, params any) rpcResp {
	c.t.Helper()
	return c.rawCall(c.body(method, params), nil)
}

// ok calls and fails the test on an error response.
func (c *client) ok(method string, params any) map[string]any {
	c.t.Helper()
	r := c.call(method, params)
	if r.Error != nil {
		c.t.Fatalf("%s: error %d %s", method, r.Error.Code, r.Error.Message)
	}
	return r.Result
}

// code calls and expects a JSON-RPC error code.
func (c *client) code(want int, method string, params any) rpcResp {
	c.t.Helper()
	r := c.call(method, params)
	if r.Error == nil || r.Error.Code != want {
		c.t.Fatalf("%s: got %+v (result %v), want error %d", method, r.Error, r.Result, want)
	}
	return r
}

// message is an A2A text message in the client's version.
func (c *client) message(id, text string, extra map[string]any) map[string]any {
	m := map[string]any{"messageId": id, "role": "user", "parts": []any{map[string]any{"kind": "text", "text": text}}, "kind": "message"}
	if c.version == "1.0" {
		m = map[string]any{"messageId": id, "role": "ROLE_USER", "parts": []any{map[string]any{"text": text}}}
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func (c *client) send(msg map[string]any, extra map[string]any) map[string]any {
	c.t.Helper()
	params := map[string]any{"message": msg}
	for k, v := range extra {
		params[k] = v
	}
	method := "message/send"
	if c.version == "1.0" {
		method = "SendMessage"
	}
	res := c.ok(method, params)
	if c.version == "1.0" {
		task, _ := res["task"].(map[string]any)
		if task == nil {
			c.t.Fatalf("SendMessage result without task: %v", res)
		}
		return task
	}
	return res
}

// stateOf reads a task's status.state.
func stateOf(task map[string]any) string {
	st, _ := task["status"].(map[string]any)
	s, _ := st["state"].(string)
	return s
}

// sseItem is one SSE event of a stream.
type sseItem struct {
	ID   string
	Resp rpcResp
}

type stream struct {
	t      *testing.T
	resp   *http.Response
	br     *bufio.Reader
	cancel context.CancelFunc
}

func (c *client) stream(body string, hdr map[string]string) *stream {
	c.t.Helper()
	resp, cancel := c.post(body, hdr)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		c.t.Fatalf("stream: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	s := &stream{t: c.t, resp: resp, br: bufio.NewReader(resp.Body), cancel: cancel}
	c.t.Cleanup(func() { s.resp.Body.Close(); s.cancel() })
	return s
}

// next returns the next data item; ok is false at the end of the stream.
func (s *stream) next() (sseItem, bool) {
	s.t.Helper()
	var it sseItem
	var data string
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			return it, false
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data != "" {
				if err := json.Unmarshal([]byte(data), &it.Resp); err != nil {
					s.t.Fatalf("stream data %q: %v", data, err)
				}
				return it, true
			}
		case strings.HasPrefix(line, "id:"):
			it.ID = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
}

func (s *stream) rest() []sseItem {
	var out []sseItem
	for {
		it, ok := s.next()
		if !ok {
			return out
		}
		out = append(out, it)
	}
}

// kinds names each item of a v0.3 stream by its kind and state.
func kinds(items []sseItem) []string {
	var out []string
	for _, it := range items {
		r := it.Resp.Result
		k, _ := r["kind"].(string)
		switch k {
		case "task", "status-update":
			k += ":" + stateOf(r)
		}
		out = append(out, k)
	}
	return out
}

func count(t *testing.T, h *nodetest.Harness, table string) int {
	t.Helper()
	var n int
	if err := h.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func runStarted(thread, run string) string {
	return fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, run)
}

func runFinished(thread, run string) string {
	return fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, run)
}

// echoAgent connects provider 0xe1 (at most max runs at once; nil, no
// limit) serving "echo", and a v0.3 client of it through a door of h's.
func echoAgent(t *testing.T, h *nodetest.Harness, max *int) (*nodetest.Prov, *client) {
	t.Helper()
	p := h.Connect(0xe1, max)
	p.Register("echo")
	return p, newClient(t, startDoor(t, h, nil), p.Key, "echo", "")
}

// sendNoWait is a non-blocking message/send of a text message; it returns
// the task as answered.
func (c *client) sendNoWait(msgID, text string, extra map[string]any) map[string]any {
	c.t.Helper()
	return c.send(c.message(msgID, text, extra), map[string]any{"configuration": map[string]any{"blocking": false}})
}

// sendBound sends, non-blocking, a message whose actor chain is head's,
// presented by head: the task's thread is bound to head. It returns the
// task's id.
func (c *client) sendBound(head *identity.Signer, msgID string) string {
	c.t.Helper()
	body := c.body("message/send", map[string]any{"message": c.message(msgID, "hi", nil),
		"metadata": map[string]any{"actorChain": chainOf(c.t, head)}, "configuration": map[string]any{"blocking": false}})
	r := c.rawCall(body, map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(head, time.Now().Unix(), []byte(body))})
	if r.Error != nil {
		c.t.Fatalf("bound send: %+v", r.Error)
	}
	return r.Result["id"].(string)
}

// cancelProof is the metadata of a cancel of task id signed by s at ts.
func cancelProof(s *identity.Signer, id string, ts int64) map[string]any {
	return map[string]any{"cancel": map[string]any{"publicKey": s.PublicKeyHex(), "timestamp": ts,
		"signature": s.Sign(identity.CancelPayload(id, ts))}}
}

// begin has p take the run it was offered and say RUN_STARTED.
func begin(p *nodetest.Prov, f wire.RunFrame) {
	p.Accept(f.RunID)
	p.Event(f.RunID, runStarted(*f.ThreadID, f.RunID))
}

// completeOffer has p take its next offer and complete it (Prov.Complete)
// from a goroutine; the frame is sent on the channel once all is sent.
func completeOffer(p *nodetest.Prov) <-chan wire.RunFrame {
	done := make(chan wire.RunFrame, 1)
	go func() {
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
		done <- f
	}()
	return done
}

// cancelHeard asks to cancel task id and reads the cancel frame its
// provider p is sent; it returns the answer to the cancel.
func cancelHeard(c *client, p *nodetest.Prov, id string) map[string]any {
	c.t.Helper()
	g := c.ok("tasks/cancel", map[string]any{"id": id})
	p.Expect(wire.TypeCancel, nil)
	return g
}

// wantTask fails the test, saying what, unless tasks/get reads task id in
// state, with the pending-cancel marker when marked and without it when not.
func (c *client) wantTask(what, id, state string, marked bool) {
	c.t.Helper()
	if g := c.ok("tasks/get", map[string]any{"id": id}); stateOf(g) != state || marker(g) != marked {
		c.t.Fatalf("%s %v", what, g)
	}
}

// onlyFrames reads what p was sent up to a barrier and fails the test on
// any frame but allowed ("type:runId"; "" allows none).
func onlyFrames(t *testing.T, p *nodetest.Prov, allowed string) {
	t.Helper()
	for _, ty := range frameTypes(p.Barrier()) {
		if ty != allowed {
			t.Fatalf("provider got %s", ty)
		}
	}
}
