package kyok_test

// Outside tests: an LLM provider and a calling agent that speak the wire
// from its spec (docs/design.md §KYOK, /work/shared/spec/provider-link.md
// §8) with nothing of funduq's own but the test harness' node and door —
// hand-written JSON frames, crypto/ed25519 signatures over the documented
// payload bytes, a bare gorilla WebSocket and net/http.

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
)

// rawLLM is an LLM provider written from the spec: frames are maps and
// literal strings, never funduq's wire types.
type rawLLM struct {
	t      *testing.T
	key    string
	ws     *websocket.Conn
	frames chan map[string]any // every frame funduq sent after welcome
	closed chan struct{}
	cerr   error // the read error that ended the link (after closed)
}

func rawSeed(seed byte) ed25519.PrivateKey {
	b, _ := hex.DecodeString(nodetest.SeedHex(seed))
	return ed25519.NewKeyFromSeed(b)
}

func (e *env) rawLLM(seed byte, models ...string) *rawLLM {
	e.t.Helper()
	priv := rawSeed(seed)
	key := hex.EncodeToString(priv.Public().(ed25519.PublicKey))
	resp, err := http.Post(e.H.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+key+`"}`))
	if err != nil {
		e.t.Fatal(err)
	}
	var tr struct{ Ticket, FunduqPublicKey string }
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	ws, _, err := websocket.DefaultDialer.Dial(e.RelayWS, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	proof := hex.EncodeToString(ed25519.Sign(priv, []byte("funduq-connect-provider:"+tr.FunduqPublicKey+":"+tr.Ticket+":"+nonce)))
	hello := fmt.Sprintf(`{"type":"hello","version":4,"publicKey":%q,"ticket":%q,"nonce":%q,"proof":%q}`, key, tr.Ticket, nonce, proof)
	if err := ws.WriteMessage(websocket.TextMessage, []byte(hello)); err != nil {
		e.t.Fatal(err)
	}
	_, welcome, err := ws.ReadMessage()
	var w struct{ Type, FunduqPublicKey, Answer string }
	if err != nil || json.Unmarshal(welcome, &w) != nil || w.Type != "welcome" {
		e.t.Fatalf("welcome: %s %v", welcome, err)
	}
	sig, _ := hex.DecodeString(w.Answer)
	pub, _ := hex.DecodeString(tr.FunduqPublicKey)
	if !ed25519.Verify(pub, []byte("funduq-connect-funduq:"+tr.Ticket+":"+nonce), sig) {
		e.t.Fatal("welcome's answer does not verify under the ticket's funduq key")
	}
	l := &rawLLM{t: e.t, key: key, ws: ws, frames: make(chan map[string]any, 256), closed: make(chan struct{})}
	go func() {
		defer close(l.closed)
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				l.cerr = err
				return
			}
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			l.frames <- m
		}
	}()
	e.t.Cleanup(func() { _ = ws.Close(); <-l.closed })
	if len(models) > 0 {
		ms, _ := json.Marshal(models)
		l.raw(`{"type":"register","models":` + string(ms) + `}`)
		l.next("registered")
	}
	return l
}

func (l *rawLLM) raw(frame string) {
	l.t.Helper()
	if err := l.ws.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		// Name funduq's close, when it was one: why the link went.
		select {
		case <-l.closed:
			l.t.Fatalf("write: %v; the link was closed: %v", err, l.cerr)
		case <-time.After(guard):
			l.t.Fatal(err)
		}
	}
}

// next is funduq's next frame, which must be of type typ.
func (l *rawLLM) next(typ string) map[string]any {
	l.t.Helper()
	select {
	case m := <-l.frames:
		if m["type"] != typ {
			l.t.Fatalf("frame %v, want %s", m, typ)
		}
		return m
	case <-l.closed:
		l.t.Fatalf("link closed (%v) waiting for %s", l.cerr, typ)
	case <-time.After(guard):
		l.t.Fatalf("no %s frame", typ)
	}
	return nil
}

func (l *rawLLM) requestID() string {
	l.t.Helper()
	id, _ := l.next("completionRequest")["requestId"].(string)
	return id
}

func rawChunk(id, data string) string {
	return fmt.Sprintf(`{"type":"chunk","requestId":%q,"data":%s}`, id, data)
}

func chunkData(content string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-x","object":"chat.completion.chunk","created":1755300000,"model":"m","choices":[{"index":0,"delta":{"content":%q},"finish_reason":null}]}`, content)
}

// rawCall is one KYOK call signed by hand: Ed25519 over
// funduq-kyok-call:{token}:{ts}:{sha256hex(signedBody)}, sending body.
func (e *env) rawCall(priv ed25519.PrivateKey, token string, ts int64, signedBody, body string) (int, http.Header, []byte) {
	e.t.Helper()
	h := sha256.Sum256([]byte(signedBody))
	sig := hex.EncodeToString(ed25519.Sign(priv, []byte("funduq-kyok-call:"+token+":"+strconv.FormatInt(ts, 10)+":"+hex.EncodeToString(h[:]))))
	req, _ := http.NewRequest(http.MethodPost, e.DoorURL+"/kyok/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Souk-Kyok-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Souk-Kyok-Signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

const streamBody = `{"model":"gpt-4","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// asyncCall runs a signed call in the background.
func (e *env) asyncCall(a *agent, token, body string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		code, b := e.call(signedCall{token: token, body: body, signer: a.signer})
		ch <- result{code, b}
	}()
	return ch
}

type result struct {
	code int
	body []byte
}

func wait(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(guard):
		t.Fatal("the calling agent hung")
	}
	return result{}
}

func sseEvents(b []byte) []string {
	return strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
}

// Frames after a completion ended — a chunk after done, a second done, an
// error after done — and frames for a completion never asked for are each
// answered with an error frame naming that requestId; the finished answer
// is unaffected.
func TestOutsideStrayAnswersAreRefused(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x51, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	res := e.asyncCall(a, token, plainBody)
	id := l.requestID()
	l.raw(rawChunk(id, chunkData("whole")))
	l.raw(`{"type":"done","requestId":"` + id + `"}`)
	if r := wait(t, res); r.code != 200 || !strings.Contains(string(r.body), `"content":"whole"`) {
		t.Fatalf("%d %s", r.code, r.body)
	}
	for _, f := range []string{
		rawChunk(id, chunkData("late")),
		`{"type":"done","requestId":"` + id + `"}`,
		`{"type":"error","requestId":"` + id + `","message":"late failure"}`,
		rawChunk("kyokreq_000000000000000000000000", chunkData("never asked")),
		`{"type":"done","requestId":"kyokreq_000000000000000000000000"}`,
	} {
		l.raw(f)
		m := l.next("error")
		if m["message"] != "no such in-flight completion on this connection" || (m["requestId"] != id && m["requestId"] != "kyokreq_000000000000000000000000") {
			t.Errorf("%s: answered %v", f, m)
		}
	}
	for _, f := range []string{`not json`, `{"type":"chunk"}`, `{"type":"bogus","requestId":"x"}`, `[1,2]`} {
		l.raw(f)
		if m := l.next("error"); m["message"] == "" {
			t.Errorf("%s: answered %v", f, m)
		}
	}
	eventually(t, "one completion counted", func() bool {
		q := e.H.Quality(l.key)
		return q.Completions == 1 && q.Failed == 0 && q.Refused == 0
	})
}

// The LLM provider's link dropping mid-answer, or sending a frame over the
// link's limit (closed with 1009), ends the call with a typed failure: 502
// for a collapsed call, one final error event and no [DONE] on a stream.
func TestOutsideLinkLossMidAnswer(t *testing.T) {
	e := newEnvWith(t, 0, func(c *config.Broker) { c.MaxFrame = 64 << 10 })
	a := e.connectAgent(0x11, "translator")
	for i, x := range []struct {
		name string
		end  func(l *rawLLM, id string)
	}{
		{"socket dropped", func(l *rawLLM, id string) { _ = l.ws.UnderlyingConn().Close() }},
		{"oversized frame", func(l *rawLLM, id string) {
			// The write may fail part-way: funduq closes as soon as the
			// frame passes its limit.
			_ = l.ws.WriteMessage(websocket.TextMessage, []byte(rawChunk(id, chunkData(strings.Repeat("x", 128<<10)))))
			<-l.closed
			var ce *websocket.CloseError
			if !asClose(l.cerr, &ce) || ce.Code != websocket.CloseMessageTooBig {
				t.Errorf("link ended with %v, want 1009", l.cerr)
			}
		}},
	} {
		for j, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", x.name, stream), func(t *testing.T) {
				l, id, res := e.midAnswer(t, a, byte(0x60+2*i+j), stream)
				x.end(l, id)
				r := wait(t, res)
				if !stream {
					if got, _ := errorCode(t, r.body); r.code != 502 || got != "llm_failed" {
						t.Fatalf("%d %s", r.code, r.body)
					}
					return
				}
				ev := sseEvents(r.body)
				if r.code != 200 || len(ev) != 2 || !strings.Contains(ev[0], `"content":"part"`) || !strings.Contains(ev[1], "funduq_relay_failed") {
					t.Fatalf("%d %q", r.code, ev)
				}
				eventually(t, "failed counted", func() bool { return e.H.Quality(l.key).Failed == 1 })
			})
		}
	}
}

// midAnswer has agent a call a raw LLM provider (seed) for a completion,
// streamed or not, and the provider answer one chunk ("part"): a
// completion in flight, for a test to break.
func (e *env) midAnswer(t *testing.T, a *agent, seed byte, stream bool) (l *rawLLM, id string, res <-chan result) {
	t.Helper()
	l = e.rawLLM(seed, "gpt-4")
	l.t = t
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	body := plainBody
	if stream {
		body = streamBody
	}
	res = e.asyncCall(a, token, body)
	id = l.requestID()
	l.raw(rawChunk(id, chunkData("part")))
	// The relay has put the chunk on the door's reply stream, behind its
	// "accepted": whatever breaks the completion next comes after it, so
	// a streamed call has begun (200) before it hears of the break.
	eventually(t, "the chunk relayed to the door", func() bool {
		n, err := e.rdb.XLen(context.Background(), kyok.ReplyStream(e.H.Prefix, id)).Result()
		return err == nil && n >= 2
	})
	return l, id, res
}

func mintToken(runID, key, agent string) string {
	return identity.MintKyokToken([]byte(secret), identity.NewKyokClaims(runID, key, agent, time.Now()))
}

func asClose(err error, ce **websocket.CloseError) bool {
	c, ok := err.(*websocket.CloseError)
	*ce = c
	return ok
}

// The collapse (design.md §KYOK) against odd chunk orders: choice indexes
// out of order and with gaps, null contents and finish reasons, a finish
// reason followed by an empty one, usage followed by a null usage, and
// nulls at depth.
func TestOutsideCollapseOddOrders(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x53, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	res := e.asyncCall(a, token, plainBody)
	id := l.requestID()
	for _, d := range []string{
		`{"id":"first","object":"chat.completion.chunk","created":11,"model":"m1","choices":[{"index":2,"delta":{"content":"C"},"finish_reason":null}]}`,
		`{"id":"second","object":"chat.completion.chunk","created":22,"model":"m2","choices":[{"index":0,"delta":{"content":null,"role":null},"finish_reason":null},{"index":2,"delta":{"content":"c"},"finish_reason":"length"}]}`,
		`{"id":"third","object":"chat.completion.chunk","created":33,"model":"m3","choices":[{"index":0,"delta":{"content":"A","tool_calls":null},"finish_reason":null}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
		`{"id":"fourth","object":"chat.completion.chunk","created":44,"model":"m4","choices":[{"index":2,"delta":{},"finish_reason":""}],"usage":null}`,
	} {
		l.raw(rawChunk(id, d))
	}
	l.raw(`{"type":"done","requestId":"` + id + `"}`)
	r := wait(t, res)
	if r.code != 200 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	var got struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
		Choices []struct {
			Index   int64 `json:"index"`
			Message struct {
				Role    string  `json:"role"`
				Content *string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage map[string]int `json:"usage"`
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != "first" || got.Created != 11 || got.Model != "m1" || got.Object != "chat.completion" {
		t.Errorf("header %s", r.body)
	}
	if len(got.Choices) != 2 || got.Choices[0].Index != 0 || got.Choices[1].Index != 2 {
		t.Fatalf("choices %s", r.body)
	}
	for i, want := range []struct{ content, finish string }{{"A", "stop"}, {"Cc", "length"}} {
		c := got.Choices[i]
		if c.Message.Role != "assistant" || c.Message.Content == nil || *c.Message.Content != want.content || c.FinishReason != want.finish {
			t.Errorf("choice %d: %s", i, r.body)
		}
	}
	if got.Usage["total_tokens"] != 3 {
		t.Errorf("usage %s", r.body)
	}
}

// A stream relays each chunk with null members dropped at any depth, array
// elements (null ones too) kept, everything else verbatim.
func TestOutsideStreamDropsNullsAtDepth(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x54, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	res := e.asyncCall(a, token, streamBody)
	id := l.requestID()
	l.raw(rawChunk(id, `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":null,`+
		`"choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":0,"function":{"name":"f","arguments":null}}]},"logprobs":null,"finish_reason":null}],`+
		`"usage":{"prompt_tokens":1,"details":{"cached":null,"list":[null,1,{"k":null}]}}}`))
	l.raw(`{"type":"done","requestId":"` + id + `"}`)
	r := wait(t, res)
	ev := sseEvents(r.body)
	want := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x","tool_calls":[{"index":0,"function":{"name":"f"}}]}}],"usage":{"prompt_tokens":1,"details":{"list":[null,1,{}]}}}`
	if r.code != 200 || len(ev) != 2 || ev[0] != want || ev[1] != "data: [DONE]" {
		t.Fatalf("%d %q", r.code, ev)
	}
}

// Strangers and misused credentials, from outside: each refused with its
// documented status, and a stranger learns no more than a token holder
// for a run that is not theirs (the same body for an unknown run, another
// agent's run and an ended one).
func TestOutsideStrangersAndMisusedTokens(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x55, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	b := e.connectAgent(0x12, "summarizer") // a second calling agent, its own run
	ref := kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}
	runA, threadA, tokA := e.startRun(a, ref, "")
	_, _, tokB := e.startRun(b, ref, "")
	privA, privB, stranger := rawSeed(0x11), rawSeed(0x12), rawSeed(0x7f)
	errBody := func(code int, b []byte) string { c, _ := errorCode(t, b); return strconv.Itoa(code) + " " + c }

	for _, x := range []struct {
		name       string
		priv       ed25519.PrivateKey
		token      string
		ts         int64 // seconds from the clock read at the call
		signed     string
		sent       string
		wantStatus string
	}{
		{"a stranger's made-up token", stranger, "eyJydW5JZCI6IngifQ==.00", 0, plainBody, plainBody, "401 invalid_token"},
		{"a token signed by a stranger's key", stranger, tokA, 0, plainBody, plainBody, "401 invalid_signature"},
		{"B signing A's token", privB, tokA, 0, plainBody, plainBody, "401 invalid_signature"},
		{"A's signature over another body", privA, tokA, 0, plainBody, streamBody, "401 invalid_signature"},
		{"61 s stale", privA, tokA, -61, plainBody, plainBody, "401 invalid_signature"},
		{"65 s ahead", privA, tokA, 65, plainBody, plainBody, "401 invalid_signature"},
		{"A's token with a byte added", privA, tokA + "x", 0, plainBody, plainBody, "401 invalid_token"},
	} {
		t.Run(x.name, func(t *testing.T) {
			code, _, body := e.rawCall(x.priv, x.token, time.Now().Unix()+x.ts, x.signed, x.sent)
			if got := errBody(code, body); got != x.wantStatus {
				t.Fatalf("%s %s, want %s", got, body, x.wantStatus)
			}
			if strings.Contains(string(body), runA) || strings.Contains(string(body), a.Key) {
				t.Fatalf("refusal names the run or agent: %s", body)
			}
		})
	}

	// B's own token works only for B's run; the answer goes to the bound LLM.
	res := make(chan result, 1)
	go func() {
		code, _, body := e.rawCall(privB, tokB, time.Now().Unix(), plainBody, plainBody)
		res <- result{code, body}
	}()
	id := l.requestID()
	l.raw(rawChunk(id, chunkData("for B")))
	l.raw(`{"type":"done","requestId":"` + id + `"}`)
	if r := wait(t, res); r.code != 200 || !strings.Contains(string(r.body), "for B") {
		t.Fatalf("%d %s", r.code, r.body)
	}

	// Not-live answers say the same, whatever the reason.
	unknown := mintToken("run-does-not-exist", a.Key, a.Name)
	_, _, unknownBody := e.rawCall(privA, unknown, time.Now().Unix(), plainBody, plainBody)
	foreign := mintToken(runA, b.Key, b.Name) // B naming A's run
	code, _, foreignBody := e.rawCall(privB, foreign, time.Now().Unix(), plainBody, plainBody)
	if code != 403 || !bytes.Equal(unknownBody, foreignBody) {
		t.Fatalf("%d %s vs %s", code, foreignBody, unknownBody)
	}
	a.Prov.Complete(runA, threadA)
	e.H.WaitStatus(runA, "completed")
	code, _, endedBody := e.rawCall(privA, tokA, time.Now().Unix(), plainBody, plainBody)
	if code != 403 || !bytes.Equal(endedBody, unknownBody) {
		t.Fatalf("replayed after the run ended: %d %s", code, endedBody)
	}
}

// Two LLM providers offer a model of the same name; the binding's key
// decides, and the other one never sees the call — not even once the bound
// one has gone (then the call fails at once, 503 llm_not_attached).
func TestOutsideSameModelNameTwoProviders(t *testing.T) {
	e := newEnv(t, 0)
	bound := e.rawLLM(0x56, "gpt-4")
	other := e.rawLLM(0x57, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: bound.key, Name: "gpt-4"}, "")
	res := e.asyncCall(a, token, plainBody)
	id := bound.requestID()
	bound.raw(rawChunk(id, chunkData("bound")))
	bound.raw(`{"type":"done","requestId":"` + id + `"}`)
	if r := wait(t, res); r.code != 200 || !strings.Contains(string(r.body), "bound") {
		t.Fatalf("%d %s", r.code, r.body)
	}
	_ = bound.ws.Close()
	<-bound.closed
	eventually(t, "bound offering unserved", func() bool {
		ok, _ := e.H.Store.LLMOfferingServed(t.Context(), bound.key, "gpt-4")
		return !ok
	})
	r := wait(t, e.asyncCall(a, token, plainBody))
	if got, _ := errorCode(t, r.body); r.code != 503 || got != "llm_not_attached" {
		t.Fatalf("%d %s", r.code, r.body)
	}
	// The barrier: the other link is still answered in order, with nothing
	// delivered to it before.
	other.raw(`{"type":"done","requestId":"kyokreq_000000000000000000000000"}`)
	if m := other.next("error"); m["requestId"] != "kyokreq_000000000000000000000000" {
		t.Fatalf("the other provider got %v", m)
	}
}

// Two completions in flight on one link, their chunks interleaved and
// ended in the other order, each reach their own caller whole; a register
// that drops the model mid-answer leaves the answers in flight alone and
// fails the next call at once (503 llm_not_attached); a token sent without
// "Bearer " is the whole header (provider-link.md §8.2).
func TestOutsideInterleavedAnswersAndMidAnswerRegister(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x59, "gpt-4", "claude")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	one := e.asyncCall(a, token, plainBody)
	id1 := l.requestID()
	two := e.asyncCall(a, token, streamBody)
	id2 := l.requestID()
	l.raw(rawChunk(id2, chunkData("2a")))
	l.raw(rawChunk(id1, chunkData("1a")))
	l.raw(`{"type":"register","models":["claude"]}`)
	l.next("registered")
	l.raw(rawChunk(id2, chunkData("2b")))
	l.raw(rawChunk(id1, chunkData("1b")))
	l.raw(`{"type":"done","requestId":"` + id2 + `"}`)
	l.raw(`{"type":"done","requestId":"` + id1 + `"}`)
	if r := wait(t, one); r.code != 200 || !strings.Contains(string(r.body), `"content":"1a1b"`) {
		t.Fatalf("one: %d %s", r.code, r.body)
	}
	r := wait(t, two)
	if ev := sseEvents(r.body); r.code != 200 || len(ev) != 3 || !strings.Contains(ev[0], `"2a"`) || !strings.Contains(ev[1], `"2b"`) || ev[2] != "data: [DONE]" {
		t.Fatalf("two: %d %q", r.code, ev)
	}
	ts := time.Now().Unix()
	req, _ := http.NewRequest(http.MethodPost, e.DoorURL+"/kyok/v1/chat/completions", strings.NewReader(plainBody))
	req.Header.Set("Authorization", token)
	req.Header.Set("X-Souk-Kyok-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Souk-Kyok-Signature", a.signer.Sign(identity.KyokCallPayload(token, ts, []byte(plainBody))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, _ := errorCode(t, b); resp.StatusCode != 503 || got != "llm_not_attached" {
		t.Fatalf("after gpt-4 was dropped: %d %s", resp.StatusCode, b)
	}
}
