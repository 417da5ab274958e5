package kyok_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.MainWithPools(m)
}

// guard bounds every wait: a hang detector, never a timing assertion.
const guard = 15 * time.Second

const secret = nodetest.TokenSecret

// env is a real broker node (nodetest), a KYOK relay leading under the
// node's epoch and serving /ws/kyok on loopback, and a KYOK door on loopback.
type env struct {
	t       *testing.T
	H       *nodetest.Harness
	RelayWS string // ws://…/ws/kyok
	DoorURL string
	rdb     *redis.Client
}

func newEnv(t *testing.T, gap time.Duration) *env {
	t.Helper()
	return newEnvWith(t, gap, nil)
}

// newEnvWith is newEnv with the node's configuration adjusted by mut.
func newEnvWith(t *testing.T, gap time.Duration, mut func(*config.Broker)) *env {
	t.Helper()
	h := nodetest.StartWith(t, mut, func(o *node.Options) { o.KyokGap, o.KyokBlock = gap, 100*time.Millisecond })
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	door, err := kyokdoor.New(kyokdoor.Options{Store: h.Store, Redis: rdb, Prefix: h.Prefix,
		TokenSecret: []byte(secret), AckTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	dmux := http.NewServeMux()
	for _, p := range kyokdoor.Patterns() {
		dmux.Handle(p, door)
	}
	ds := httptest.NewServer(dmux)
	t.Cleanup(func() {
		ds.Close()
		rdb.Close()
	})
	// The LLM provider links to the broker node's own /ws/kyok.
	return &env{t: t, H: h, RelayWS: "ws" + strings.TrimPrefix(h.URL, "http") + "/ws/kyok",
		DoorURL: ds.URL, rdb: rdb}
}

// llm is a scripted LLM provider speaking the real /ws/kyok wire.
type llm struct {
	t      *testing.T
	Key    string
	ws     *websocket.Conn
	wmu    sync.Mutex
	reqs   chan wire.KyokCompletionRequest
	other  chan []byte
	closed chan struct{}
	// closeErr is what ended the read loop (funduq's close, say); read
	// it once closed is closed.
	closeErr error
	// answer, when set, answers each completionRequest (in its own goroutine).
	mu     sync.Mutex
	answer func(l *llm, req wire.KyokCompletionRequest)
}

func (e *env) attachLLM(seed byte, models ...string) *llm {
	e.t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		e.t.Fatal(err)
	}
	l := &llm{t: e.t, Key: s.PublicKeyHex(), reqs: make(chan wire.KyokCompletionRequest, 64),
		other: make(chan []byte, 64), closed: make(chan struct{})}
	resp, err := http.Post(e.H.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+l.Key+`"}`))
	if err != nil {
		e.t.Fatal(err)
	}
	var tr wire.TicketResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	ws, _, err := websocket.DefaultDialer.Dial(e.RelayWS, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	l.ws = ws
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	l.send(wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: l.Key, Ticket: tr.Ticket, Nonce: nonce,
		Proof: s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))})
	_, welcome, err := ws.ReadMessage()
	if typ, _ := wire.PeekType(welcome); err != nil || typ != wire.TypeWelcome {
		e.t.Fatalf("welcome: %s %v", welcome, err)
	}
	go l.read()
	e.t.Cleanup(l.Close)
	if len(models) > 0 {
		l.send(wire.RegisterModels{Type: wire.TypeRegister, Models: models})
		var r wire.Registered
		l.expect(wire.TypeRegistered, &r)
	}
	return l
}

func (l *llm) read() {
	defer close(l.closed)
	for {
		_, data, err := l.ws.ReadMessage()
		if err != nil {
			l.closeErr = err
			return
		}
		typ, _ := wire.PeekType(data)
		if typ == wire.TypeCompletionRequest {
			var req wire.KyokCompletionRequest
			_ = json.Unmarshal(data, &req)
			l.mu.Lock()
			a := l.answer
			l.mu.Unlock()
			if a != nil {
				go a(l, req)
			}
			l.reqs <- req
			continue
		}
		l.other <- data
	}
}

func (l *llm) onRequest(a func(l *llm, req wire.KyokCompletionRequest)) {
	l.mu.Lock()
	l.answer = a
	l.mu.Unlock()
}

func (l *llm) send(v any) {
	b, _ := json.Marshal(v)
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_ = l.ws.WriteMessage(websocket.TextMessage, b)
}

func (l *llm) Close() { _ = l.ws.Close(); <-l.closed }

func (l *llm) expect(typ string, into any) []byte {
	l.t.Helper()
	select {
	case f := <-l.other:
		if got, _ := wire.PeekType(f); got != typ {
			l.t.Fatalf("frame %s, want %s", f, typ)
		}
		if into != nil {
			_ = json.Unmarshal(f, into)
		}
		return f
	case <-time.After(guard):
		l.t.Fatalf("no %s frame", typ)
	}
	return nil
}

func (l *llm) request() wire.KyokCompletionRequest {
	l.t.Helper()
	select {
	case r := <-l.reqs:
		return r
	case <-time.After(guard):
		l.t.Fatal("no completionRequest arrived")
	}
	return wire.KyokCompletionRequest{}
}

func chunkJSON(id, content, finish string) json.RawMessage {
	fr := "null"
	if finish != "" {
		fr = strconv.Quote(finish)
	}
	return json.RawMessage(fmt.Sprintf(`{"id":%q,"object":"chat.completion.chunk","created":1755300000,"model":"gpt-4","choices":[{"index":0,"delta":{"role":"assistant","content":%q},"finish_reason":%s}]}`,
		id, content, fr))
}

// streamAnswer answers with chunks then done.
func streamAnswer(parts ...string) func(l *llm, req wire.KyokCompletionRequest) {
	return func(l *llm, req wire.KyokCompletionRequest) {
		for i, p := range parts {
			fin := ""
			if i == len(parts)-1 {
				fin = "stop"
			}
			l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: chunkJSON("chatcmpl-1", p, fin)})
		}
		l.send(wire.Done{Type: wire.TypeDone, RequestID: req.RequestID})
	}
}

// agent is the calling agent: a scripted agent provider holding a run.
type agent struct {
	signer *identity.Signer
	Prov   *nodetest.Prov
	Key    string
	Name   string
}

func (e *env) connectAgent(seed byte, name string) *agent {
	e.t.Helper()
	s, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	p := e.H.Connect(seed, nil)
	p.Register(name)
	return &agent{signer: s, Prov: p, Key: p.Key, Name: name}
}

// startRun inserts a run the way a door does, binds it to the offering
// (with context) and has the agent accept it. It returns the run id and a
// fresh token.
func (e *env) startRun(a *agent, ref kyok.Ref, callerContext string) (runID, threadID, token string) {
	e.t.Helper()
	runID, threadID = e.startRunQueued(a, ref, callerContext)
	f := a.Prov.Offer()
	if f.RunID != runID {
		e.t.Fatalf("offered %s, want %s", f.RunID, runID)
	}
	a.Prov.Accept(runID)
	e.H.WaitStatus(runID, run.Running)
	token = identity.MintKyokToken([]byte(secret), identity.NewKyokClaims(runID, a.Key, a.Name, time.Now()))
	return runID, threadID, token
}

// startRunQueued inserts a run the way a door does and binds it to the
// offering (with context, when one is given).
func (e *env) startRunQueued(a *agent, ref kyok.Ref, callerContext string) (runID, threadID string) {
	e.t.Helper()
	runID, threadID = e.H.Door(a.Key, a.Name, "", "translate this")
	if ref.Name != "" {
		b := kyok.Binding{LLMProviderKey: ref.ProviderKey, LLMName: ref.Name}
		if callerContext != "" {
			b.Context = json.RawMessage(callerContext)
		}
		sealed, err := kyok.Seal([]byte(secret), b)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.H.Store.SetKyokBinding(context.Background(), runID, ref.ProviderKey, ref.Name, sealed); err != nil {
			e.t.Fatal(err)
		}
	}
	return runID, threadID
}

// signedCall is one raw HTTP call to the door.
type signedCall struct {
	token  string
	body   string
	ts     *int64 // nil: now
	signer *identity.Signer
	noSig  bool
	header *http.Header // when set, receives the answer's header
}

func (e *env) call(c signedCall) (int, []byte) {
	e.t.Helper()
	ts := time.Now().Unix()
	if c.ts != nil {
		ts = *c.ts
	}
	req, _ := http.NewRequest(http.MethodPost, e.DoorURL+kyokdoor.Path, strings.NewReader(c.body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	if !c.noSig {
		req.Header.Set(kyokdoor.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(kyokdoor.HeaderSignature, c.signer.Sign(identity.KyokCallPayload(c.token, ts, []byte(c.body))))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if c.header != nil {
		*c.header = resp.Header
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// signer is the openai-go middleware that signs a KYOK call the way an
// agent's SDK does: timestamp and Ed25519 signature over token, timestamp
// and the exact body bytes.
func signer(s *identity.Signer, token string) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body.Close()
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		ts := time.Now().Unix()
		req.Header.Set(kyokdoor.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(kyokdoor.HeaderSignature, s.Sign(identity.KyokCallPayload(token, ts, body)))
		return next(req)
	}
}

func errorCode(t *testing.T, b []byte) (code string, refusal json.RawMessage) {
	t.Helper()
	var env struct {
		Error struct {
			Code    string          `json:"code"`
			Message string          `json:"message"`
			Refusal json.RawMessage `json:"refusal"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	return env.Error.Code, env.Error.Refusal
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
