package scaling

// Helpers for X8 (KYOK completions across doors and a leader death): a
// scripted LLM provider on /ws/kyok, a KYOK opt-in run start at an AG-UI
// door, and a signed streaming completion call at a KYOK door.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// kllm is a scripted LLM provider speaking the real /ws/kyok wire (ticket,
// hello/welcome pinned to funduq's key, register with models). Each
// completionRequest is answered by the current script in its own goroutine.
type kllm struct {
	t      testing.TB
	key    string
	ws     *websocket.Conn
	wmu    sync.Mutex
	reqs   chan wire.KyokCompletionRequest
	other  chan []byte
	closed chan struct{}
	mu     sync.Mutex
	script func(l *kllm, req wire.KyokCompletionRequest)
}

// attachLLM fetches a ticket at base, opens /ws/kyok at base and registers
// models. It returns nil and the refusal (status and body) when base does
// not take the link.
func (c *cluster) attachLLM(s *identity.Signer, base string, models ...string) (*kllm, string) {
	c.t.Helper()
	tr, code := ticket(c.t, base, s.PublicKeyHex())
	if code != 201 {
		return nil, fmt.Sprintf("ticket: %d", code)
	}
	if tr.FunduqPublicKey != c.key {
		c.t.Fatalf("the ticket names funduq key %s, pinned %s", tr.FunduqPublicKey, c.key)
	}
	d := websocket.Dialer{HandshakeTimeout: 3 * time.Second}
	ws, resp, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws/kyok", nil)
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return nil, fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		}
		return nil, err.Error()
	}
	l := &kllm{t: c.t, key: s.PublicKeyHex(), ws: ws, reqs: make(chan wire.KyokCompletionRequest, 64),
		other: make(chan []byte, 64), closed: make(chan struct{})}
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	l.send(wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: l.key, Ticket: tr.Ticket, Nonce: nonce,
		Proof: s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))})
	_ = ws.SetReadDeadline(time.Now().Add(margin))
	_, raw, err := ws.ReadMessage()
	_ = ws.SetReadDeadline(time.Time{})
	if typ, _ := wire.PeekType(raw); err != nil || typ != wire.TypeWelcome {
		ws.Close()
		return nil, fmt.Sprintf("no welcome: %s %v", raw, err)
	}
	var w wire.Welcome
	_ = json.Unmarshal(raw, &w)
	pub, err := identity.ParsePublicKey(w.FunduqPublicKey)
	if err != nil || w.FunduqPublicKey != c.key {
		c.t.Fatalf("/ws/kyok welcome names funduq key %s, pinned %s", w.FunduqPublicKey, c.key)
	}
	if err := identity.Verify(pub, identity.FunduqConnectPayload(tr.Ticket, nonce), w.Answer); err != nil {
		c.t.Fatalf("/ws/kyok welcome answer does not verify under the pinned key: %v", err)
	}
	go l.read()
	c.t.Cleanup(l.close)
	if len(models) > 0 {
		l.send(wire.RegisterModels{Type: wire.TypeRegister, Models: models})
		select {
		case f := <-l.other:
			if typ, _ := wire.PeekType(f); typ != wire.TypeRegistered {
				c.t.Fatalf("/ws/kyok register answered %s", f)
			}
		case <-time.After(margin):
			c.t.Fatalf("/ws/kyok register not answered within %v", margin)
		}
	}
	return l, ""
}

func (l *kllm) read() {
	defer close(l.closed)
	for {
		_, data, err := l.ws.ReadMessage()
		if err != nil {
			return
		}
		typ, _ := wire.PeekType(data)
		if typ == wire.TypeCompletionRequest {
			var req wire.KyokCompletionRequest
			_ = json.Unmarshal(data, &req)
			l.mu.Lock()
			s := l.script
			l.mu.Unlock()
			if s != nil {
				go s(l, req)
			}
			select {
			case l.reqs <- req:
			default:
			}
			continue
		}
		select {
		case l.other <- data:
		default:
		}
	}
}

func (l *kllm) onRequest(s func(l *kllm, req wire.KyokCompletionRequest)) {
	l.mu.Lock()
	l.script = s
	l.mu.Unlock()
}

func (l *kllm) send(v any) {
	b, _ := json.Marshal(v)
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_ = l.ws.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_ = l.ws.WriteMessage(websocket.TextMessage, b)
}

func (l *kllm) close() { _ = l.ws.Close(); <-l.closed }

func (l *kllm) isClosed() bool {
	select {
	case <-l.closed:
		return true
	default:
		return false
	}
}

// request waits (at most bound) for the next completionRequest.
func (l *kllm) request(bound time.Duration) (wire.KyokCompletionRequest, bool) {
	select {
	case r := <-l.reqs:
		return r, true
	case <-time.After(bound):
		return wire.KyokCompletionRequest{}, false
	}
}

func (l *kllm) chunk(id, content, finish string) {
	fr := "null"
	if finish != "" {
		fr = strconv.Quote(finish)
	}
	l.send(wire.Chunk{Type: wire.TypeChunk, RequestID: id, Data: json.RawMessage(fmt.Sprintf(
		`{"id":"chatcmpl-x8","object":"chat.completion.chunk","created":1755300000,"model":"gpt-4","choices":[{"index":0,"delta":{"role":"assistant","content":%q},"finish_reason":%s}]}`,
		content, fr))})
}

// answerWith streams parts as chunks (a short pause between them, so order
// is tested across Redis round trips) and then done.
func answerWith(parts ...string) func(l *kllm, req wire.KyokCompletionRequest) {
	return func(l *kllm, req wire.KyokCompletionRequest) {
		for i, p := range parts {
			fin := ""
			if i == len(parts)-1 {
				fin = "stop"
			}
			l.chunk(req.RequestID, p, fin)
			time.Sleep(15 * time.Millisecond)
		}
		l.send(wire.Done{Type: wire.TypeDone, RequestID: req.RequestID})
	}
}

// startKyok POSTs an AG-UI RunAgentInput opting into KYOK (offering
// llmKey/model, with the caller's private context ctxJSON) to door d.
func (c *cluster) startKyok(d *proc, key, name, llmKey, model, ctxJSON string) *stream {
	c.t.Helper()
	thread := newThreadID()
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":"translate this"}],`+
		`"tools":[],"context":[],"state":null,"forwardedProps":{"kyok":{"llmProvider":{"providerKey":%q,"name":%q},"context":%s}}}`,
		thread, "caller-"+thread, llmKey, model, ctxJSON)
	s := c.openStream(http.MethodPost, d.url+"/agui/"+key+"/"+name, body, -1)
	s.waitRunID(c.t, margin+deliverTimeout)
	return s
}

// kyokTokenOf reads forwardedProps.funduq.kyok.token of a delivered run
// input.
func kyokTokenOf(input json.RawMessage) string {
	var in struct {
		ForwardedProps struct {
			Funduq struct {
				Kyok struct {
					Token string `json:"token"`
				} `json:"kyok"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	_ = json.Unmarshal(input, &in)
	return in.ForwardedProps.Funduq.Kyok.Token
}

// kcall is one signed completion call at a KYOK door, streamed.
type kcall struct {
	began  time.Time
	status int
	ctype  string
	retry  string // Retry-After
	body   string // a non-SSE answer
	mu     sync.Mutex
	data   []kdata // SSE data payloads in order
	wake   chan struct{}
	done   chan struct{}
	ended  time.Time
	err    error
	cancel context.CancelFunc
}

type kdata struct {
	raw string
	at  time.Time
}

func kyokBody(text string, stream bool) string {
	return fmt.Sprintf(`{"model":"gpt-4","stream":%t,"messages":[{"role":"user","content":%q}]}`, stream, text)
}

// kyokCall POSTs body to door d's KYOK route, signed by the agent
// provider's key over the token, the timestamp and the exact body.
func (c *cluster) kyokCall(d *proc, s *identity.Signer, token, body string) *kcall {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kcall{began: time.Now(), wake: make(chan struct{}, 1), done: make(chan struct{}), cancel: cancel}
	c.t.Cleanup(func() { cancel(); <-k.done })
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/kyok/v1/chat/completions", strings.NewReader(body))
	ts := time.Now().Unix()
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Souk-Kyok-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Souk-Kyok-Signature", s.Sign(identity.KyokCallPayload(token, ts, []byte(body))))
	go func() {
		defer func() {
			k.mu.Lock()
			k.ended = time.Now()
			k.mu.Unlock()
			close(k.done)
		}()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			k.err = err
			return
		}
		defer resp.Body.Close()
		k.mu.Lock()
		k.status, k.ctype, k.retry = resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After")
		k.mu.Unlock()
		if !strings.HasPrefix(k.ctype, "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			k.body = string(b)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				k.mu.Lock()
				k.data = append(k.data, kdata{raw: strings.TrimSpace(v), at: time.Now()})
				k.mu.Unlock()
				select {
				case k.wake <- struct{}{}:
				default:
				}
			}
		}
		k.err = sc.Err()
	}()
	return k
}

func (k *kcall) snapshot() []kdata {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]kdata(nil), k.data...)
}

// waitData waits (at most bound) until the call holds n data payloads.
func (k *kcall) waitData(n int, bound time.Duration) ([]kdata, bool) {
	deadline := time.After(bound)
	for {
		if d := k.snapshot(); len(d) >= n {
			return d, true
		}
		select {
		case <-k.wake:
		case <-k.done:
			d := k.snapshot()
			return d, len(d) >= n
		case <-deadline:
			return k.snapshot(), false
		}
	}
}

// wait waits (at most bound) for the call to end and reports whether it did.
func (k *kcall) wait(bound time.Duration) bool {
	select {
	case <-k.done:
		return true
	case <-time.After(bound):
		return false
	}
}

// contents reads the delta contents of the chunk payloads, and whether the
// stream ended with [DONE] and/or an error payload (the error's JSON).
func contents(d []kdata) (parts []string, gotDone bool, errPayload string, after int) {
	for i, x := range d {
		switch {
		case x.raw == "[DONE]":
			gotDone = true
			after = len(d) - 1 - i
		case strings.HasPrefix(x.raw, `{"error"`):
			errPayload = x.raw
			after = len(d) - 1 - i
		default:
			var ch struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			_ = json.Unmarshal([]byte(x.raw), &ch)
			for _, c := range ch.Choices {
				parts = append(parts, c.Delta.Content)
			}
		}
	}
	return parts, gotDone, errPayload, after
}

// errorCodeOf reads error.code of a door's JSON refusal.
func errorCodeOf(body string) string {
	var env struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &env)
	return env.Error.Code
}

// kyokBinding reads whether run id still has a persisted binding.
func (c *cluster) kyokBinding(id string) (sealed bool, llmKey, llmName string) {
	c.t.Helper()
	err := c.db.QueryRow(context.Background(), `SELECT kyok_binding IS NOT NULL, coalesce(kyok_llm_provider_key,''),
		coalesce(kyok_llm_name,'') FROM runs WHERE run_id = $1`, id).Scan(&sealed, &llmKey, &llmName)
	if err != nil {
		c.t.Fatalf("read the kyok binding of %s: %v", id, err)
	}
	return sealed, llmKey, llmName
}

// get reads a door path and returns status and body.
func (c *cluster) get(d *proc, path string) (int, string) {
	c.t.Helper()
	resp, err := quickLong.Get(d.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// ---------------------------------------------------------------- X8 phases

// x8 is X8's state from one phase to the next.
type x8 struct {
	c             *cluster
	l             *proc  // the leader the LLM provider and the agent attach to
	s             *proc  // the standby that takes over
	p2            *wprov // the agent's link to s
	llmSg, agSg   *identity.Signer
	llm           *kllm
	ag            *wprov
	bk            *book
	st            *stream
	id, thread    string
	token         string
	secret        string // the caller's private KYOK context value
	inflight      *kcall
	killed        time.Time
	release       chan struct{}
	boundInFlight time.Duration
	endedWithin   bool
	endedAfter    time.Duration
}

// x8Bind: an LLM provider and the agent attach to L; a run opting into KYOK
// starts at D1 and is accepted; the binding is persisted in shared storage;
// a signed streaming completion at D2 comes back in order.
func x8Bind(t testing.TB, c *cluster) *x8 {
	x := &x8{c: c, l: c.waitLeader(boot), llmSg: newSigner(t, 0x81), agSg: newSigner(t, 0x82), bk: newBook(),
		secret: "v-secret-x8-" + strconv.FormatInt(time.Now().UnixNano(), 36), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-x.release:
		default:
			close(x.release)
		}
	})
	llm, ref := c.attachLLM(x.llmSg, x.l.url, "gpt-4")
	if llm == nil {
		t.Fatalf("the LLM provider could not attach at the leader %s: %s", x.l.name, ref)
	}
	x.llm = llm
	llm.onRequest(answerWith("Bon", "jour", " le", " monde"))
	x.ag = c.connectProvider(x.agSg, x.bk, x.l.url, x.l.url)
	x.ag.register("translator")

	x.st = c.startKyok(c.doors[0], x.agSg.PublicKeyHex(), "translator", llm.key, "gpt-4", `{"voucher":"`+x.secret+`"}`)
	f := x.ag.offer(deliverTimeout + margin)
	if f.RunID != x.st.runID {
		t.Fatalf("offered %s, started %s", f.RunID, x.st.runID)
	}
	x.id, x.thread = f.RunID, *f.ThreadID
	x.token = kyokTokenOf(f.RunInput)
	if x.token == "" {
		t.Fatalf("the delivered run input carries no forwardedProps.funduq.kyok.token: %s", f.RunInput)
	}
	if strings.Contains(string(f.RunInput), x.secret) {
		t.Errorf("the agent was shown the caller's private KYOK context in its run input")
	}
	x.ag.accept(x.id)
	x.ag.event(x.id, 1, startedEv(x.thread, x.id))
	c.waitStatus(x.id, margin, "running", func(r runRow) bool { return r.Status == "running" && r.LastSeq >= 1 })
	sealed, k, n := c.kyokBinding(x.id)
	if !sealed || k != llm.key || n != "gpt-4" {
		t.Fatalf("run %s: binding in shared storage sealed=%v offering %s/%s; want it persisted for %s/gpt-4", x.id, sealed, k, n, llm.key[:8])
	}

	// The completion lands on D2, which did not start the run.
	call := c.kyokCall(c.doors[1], x.agSg, x.token, kyokBody("translate: hello world", true))
	if !call.wait(margin + 5*time.Second) {
		t.Fatalf("the completion at d2 did not end within %v: %d data so far", margin+5*time.Second, len(call.snapshot()))
	}
	if call.status != 200 || !strings.HasPrefix(call.ctype, "text/event-stream") {
		t.Fatalf("the completion at d2: %d %s %q (err %v); want 200 SSE — the reference answered 503 \"run has no KYOK binding\" here",
			call.status, call.ctype, call.body, call.err)
	}
	parts, done, errp, _ := contents(call.snapshot())
	if got := strings.Join(parts, "|"); got != "Bon|jour| le| monde" || !done || errp != "" {
		t.Errorf("the completion at d2 streamed %q done=%v error=%s; want Bon|jour| le| monde then [DONE]", got, done, errp)
	}
	req, ok := llm.request(margin)
	switch {
	case !ok:
		t.Errorf("the LLM provider recorded no completionRequest")
	case req.RunID != x.id || req.AgentName != "translator" || req.ProviderKey != x.agSg.PublicKeyHex() || req.LLMName != "gpt-4":
		t.Errorf("the LLM provider was shown run %s agent %s/%s offering %s", req.RunID, req.ProviderKey, req.AgentName, req.LLMName)
	case !strings.Contains(string(req.Context), x.secret):
		t.Errorf("the caller's context did not reach the LLM provider: %s", req.Context)
	}
	t.Logf("run %s started at %s; completion at %s relayed through leader %s: %d chunks in order + [DONE] in %v",
		x.id, c.doors[0].name, c.doors[1].name, x.l.name, len(parts), call.ended.Sub(call.began).Round(time.Millisecond))
	return x
}

// x8KillMidCompletion: the LLM provider sends one chunk of a second
// completion at D2 and then holds; the leader is SIGKILLed. It records how
// and when the call ended, waiting at most TTL + margin.
func x8KillMidCompletion(t testing.TB, x *x8) {
	c := x.c
	x.llm.onRequest(func(l *kllm, req wire.KyokCompletionRequest) {
		l.chunk(req.RequestID, "partial", "")
		<-x.release // the LLM provider is mid-answer when the leader dies
	})
	x.inflight = c.kyokCall(c.doors[1], x.agSg, x.token, kyokBody("translate: a long text", true))
	if _, ok := x.inflight.waitData(1, margin+5*time.Second); !ok {
		t.Fatalf("the in-flight completion at d2 streamed nothing: %d %q %v", x.inflight.status, x.inflight.body, x.inflight.err)
	}
	x.l.kill(t)
	x.killed = time.Now()
	x.boundInFlight = leaseTTL + margin
}

// x8CheckFailedCleanly asserts the in-flight completion ended within the
// bound, with the chunks sent before the death in order and a final error
// payload, and no [DONE] (no resume for completions).
func x8CheckFailedCleanly(t testing.TB, x *x8) {
	x.endedWithin = x.inflight.wait(time.Until(x.killed.Add(x.boundInFlight)))
	x.endedAfter = time.Since(x.killed)
	if x.endedWithin {
		x.inflight.mu.Lock()
		x.endedAfter = x.inflight.ended.Sub(x.killed)
		x.inflight.mu.Unlock()
	}
	t.Logf("in-flight completion at d2 after SIGKILL of %s: ended=%v at %v (bound TTL + margin = %v; the door's own gap timeout is 125 s)",
		x.l.name, x.endedWithin, x.endedAfter.Round(time.Millisecond), x.boundInFlight)
	if !x.endedWithin {
		parts, _, _, _ := contents(x.inflight.snapshot())
		t.Fatalf("the in-flight completion at d2 was still open %v after the leader's SIGKILL (bound TTL + margin = %v): "+
			"it had streamed %q and nothing since; nobody writes to its reply stream any more — the door waits out its 125 s gap timeout",
			x.endedAfter.Round(time.Millisecond), x.boundInFlight, parts)
	}
	d := x.inflight.snapshot()
	parts, done, errp, after := contents(d)
	if x.inflight.status != 200 {
		t.Errorf("the in-flight completion's status %d", x.inflight.status)
	}
	if strings.Join(parts, "|") != "partial" || done || errp == "" || after != 0 {
		t.Errorf("the in-flight completion ended %q done=%v error=%s (%d payloads after the end); want \"partial\" then one error payload and no [DONE]",
			parts, done, errp, after)
	}
	t.Logf("the in-flight completion failed cleanly %v after SIGKILL: %s", x.endedAfter.Round(time.Millisecond), errp)
}

// x8Reattach: a standby takes over and the agent re-attaches to it within
// the provider grace; its run is re-adopted.
func x8Reattach(t testing.TB, x *x8) {
	c := x.c
	s := c.waitLeader(leaseTTL+margin, x.l)
	t.Logf("%s leads %v after SIGKILL (bound TTL + margin = %v)", s.name, time.Since(x.killed).Round(time.Millisecond), leaseTTL+margin)
	if !x.ag.waitClosed(margin) {
		t.Fatalf("the agent's link to the killed leader did not close")
	}
	var p2 *wprov
	ok, _ := until(leaseTTL+margin, func() bool {
		tr, code := ticket(t, s.url, x.agSg.PublicKeyHex())
		if code != 201 {
			return false
		}
		var ref *refusal
		if p2, ref = c.openLink(x.agSg, x.bk, tr, s.url); ref != nil {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	})
	if !ok {
		t.Fatalf("the agent could not re-attach at %s", s.name)
	}
	p2.register("translator")
	p2.adopt(x.id)
	p2.accept(x.id)
	r, _ := c.waitStatus(x.id, providerGrace+margin, "re-adopted", func(r runRow) bool { return r.Status == "running" && r.Epoch == c.epoch() })
	t.Logf("the agent re-attached at %s; run %s running under epoch %d", s.name, x.id, r.Epoch)
	x.s, x.p2 = s, p2
}

// x8AfterTakeover: a completion before the LLM provider re-attaches is a
// clean, retryable 503; after it re-attaches at the new leader a completion
// at D2 works; the run ends, its binding is deleted and no read path serves
// it.
func x8AfterTakeover(t testing.TB, x *x8) {
	c, s, p2 := x.c, x.s, x.p2
	// The LLM provider's link died with the leader. A completion now is a
	// clean refusal the agent can retry.
	if !x.llm.isClosed() {
		if !func() bool { ok, _ := until(margin, x.llm.isClosed); return ok }() {
			t.Errorf("the LLM provider's link to the killed leader did not close")
		}
	}
	probe := c.kyokCall(c.doors[1], x.agSg, x.token, kyokBody("translate: too early", true))
	const ackTimeout = 5 * time.Second // the door's default AckTimeout
	if !probe.wait(ackTimeout + margin) {
		t.Fatalf("a completion before the LLM provider re-attached did not end within %v", ackTimeout+margin)
	}
	code := errorCodeOf(probe.body)
	if probe.status != 503 || probe.retry == "" || (code != "llm_not_attached" && code != "relay_unavailable") {
		t.Errorf("a completion before the LLM provider re-attached: %d Retry-After %q %s; want a 503 with Retry-After",
			probe.status, probe.retry, probe.body)
	}
	t.Logf("a completion before the LLM provider re-attached: %d %s Retry-After %s in %v",
		probe.status, code, probe.retry, probe.ended.Sub(probe.began).Round(time.Millisecond))

	var llm2 *kllm
	ok, _ := until(margin, func() bool {
		llm2, _ = c.attachLLM(x.llmSg, s.url, "gpt-4")
		if llm2 == nil {
			time.Sleep(100 * time.Millisecond)
		}
		return llm2 != nil
	})
	if !ok {
		t.Fatalf("the LLM provider could not re-attach at %s within %v", s.name, margin)
	}
	llm2.onRequest(answerWith("après", " la", " reprise"))
	var next *kcall
	ok, took := until(margin, func() bool {
		next = c.kyokCall(c.doors[1], x.agSg, x.token, kyokBody("translate: after", true))
		next.wait(ackTimeout + margin)
		if next.status == 503 {
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	})
	if !ok || next.status != 200 {
		t.Fatalf("the completion after the takeover at d2: %d %q (within %v)", next.status, next.body, took)
	}
	parts, done, errp, _ := contents(next.snapshot())
	if strings.Join(parts, "|") != "après| la| reprise" || !done || errp != "" {
		t.Errorf("the completion after the takeover streamed %q done=%v error=%s", parts, done, errp)
	}
	t.Logf("after the LLM provider re-attached at %s, a completion at d2 streamed %d chunks in order + [DONE]", s.name, len(parts))

	// The run ends: its binding is deleted and never served back.
	p2.complete(x.id, x.thread, 2)
	if r, _ := c.waitTerminal(x.id, margin); r.Status != "completed" {
		t.Errorf("the run ended %s/%s", r.Status, r.Reason)
	}
	ok, took = until(margin, func() bool { sealed, _, _ := c.kyokBinding(x.id); return !sealed })
	if !ok {
		t.Errorf("run %s ended but its KYOK binding is still persisted after %v", x.id, margin)
	} else {
		t.Logf("the binding was deleted %v after the run ended", took.Round(time.Millisecond))
	}
	after := c.kyokCall(c.doors[1], x.agSg, x.token, kyokBody("translate: too late", true))
	after.wait(margin)
	if after.status != 403 || errorCodeOf(after.body) != "run_not_active" {
		t.Errorf("a completion after the run ended: %d %s; want 403 run_not_active", after.status, after.body)
	}
	for _, d := range c.doors {
		for _, path := range []string{"/runs/" + x.id + "/events", "/threads/" + x.thread} {
			status, body := c.get(d, path)
			if status != 200 {
				t.Errorf("GET %s at %s: %d", path, d.name, status)
			}
			if strings.Contains(body, x.secret) {
				t.Errorf("GET %s at %s serves the caller's private KYOK context", path, d.name)
			}
		}
	}
	var stored string
	_ = c.db.QueryRow(context.Background(), `SELECT run_input::text FROM runs WHERE run_id = $1`, x.id).Scan(&stored)
	if strings.Contains(stored, x.secret) {
		t.Errorf("the caller's private KYOK context is stored readable in the run input")
	}
	checkStream(t, "the caller's stream at d1", x.st.waitClosed(t, margin), 0, true)
	c.checkLedger(x.id)
	x.bk.checkOnce(t)
}
