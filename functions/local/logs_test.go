package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/redistest"
	runstatus "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/core/wire"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// The logs of a whole stack — a broker node (and its successor) and the
// doors, at debug — read from the outside after a realistic day: a
// stranger's register refused, a provider registering, AG-UI and A2A
// callers with bearers, presenter and view proofs, a pause answered, a
// cancel, a KYOK completion, a provider dropping and re-attaching, the
// operator console, a storage outage and a leader handover. An operator
// must find every line about a run by run_id (one key name everywhere),
// and an attacker holding a copy must find no secret in any line
// (docs/design.md §Logs).
func TestLogsFromOutside(t *testing.T) {
	const (
		pgPassword   = "pgPassw0rdLogAudit"
		consoleToken = "consoleTokenLogAudit1234"
		tokenSecret  = "tokenSecretLogAudit5678-0123456789abcdef"
		bearer       = "bearerSecretLogAudit9abc"
		userText     = "userTextSecretLogAudit"
		payloadText  = "providerPayloadSecretLogAudit"
		answerText   = "resumeAnswerSecretLogAudit"
		a2aText      = "a2aUserTextSecretLogAudit"
		kyokText     = "kyokPromptSecretLogAudit"
		llmText      = "llmAnswerSecretLogAudit"
		badConsole   = "wrongConsoleTokenLogAudit"
		strangerBody = "strangerBodySecretLogAudit"
	)
	dbURL, err := url.Parse(storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	dbURL.User = url.UserPassword(dbURL.User.Username(), pgPassword)
	_, prefix := redistest.Client(t)
	var blog, dlog syncbuf.Buffer
	logTo := func(o *node.Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&blog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	h := nodetest.StartOn(t, dbURL.String(), redistest.URL(), prefix, func(c *config.Broker) {
		c.TokenSecret, c.ConsoleToken = tokenSecret, consoleToken
	}, logTo)
	base, stopDoors := startDoorsTo(t, h, &dlog, "debug")
	secrets := map[string]string{"the PostgreSQL password": pgPassword, "the console token": consoleToken,
		"FUNDUQ_TOKEN_SECRET": tokenSecret, "a caller's bearer": bearer, "a caller's message": userText,
		"a provider's event payload": payloadText, "a caller's answer to a pause": answerText,
		"an A2A caller's message": a2aText, "a KYOK prompt": kyokText, "an LLM's answer": llmText,
		"a wrong console token": badConsole, "a stranger's body": strangerBody}
	seed, _ := hex.DecodeString(h.Cfg.IdentityKey)
	priv := ed25519.NewKeyFromSeed(seed)
	secrets["the identity key (hex)"] = h.Cfg.IdentityKey
	secrets["the identity key (base64)"] = base64.StdEncoding.EncodeToString(seed)
	secrets["the identity private key (hex)"] = hex.EncodeToString(priv)
	secrets["the identity private key (base64)"] = base64.StdEncoding.EncodeToString(priv)

	do := func(method, u, body string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	ticket := func(key string) string {
		t.Helper()
		_, b := do("POST", h.URL+"/tickets", `{"publicKey":"`+key+`"}`, map[string]string{"Content-Type": "application/json"})
		var tr wire.TicketResponse
		if err := json.Unmarshal([]byte(b), &tr); err != nil || tr.Ticket == "" {
			t.Fatalf("ticket: %s", b)
		}
		secrets["a ticket"+strconv.Itoa(len(secrets))] = tr.Ticket
		return tr.Ticket
	}

	// A stranger's register refused: a real ticket, a proof by another key.
	stranger, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x71))
	other, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x72))
	{
		tk := ticket(stranger.PublicKeyHex())
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
		if err != nil {
			t.Fatal(err)
		}
		nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
		proof := other.Sign(identity.ProviderConnectPayload(h.Node.FunduqKey(), tk, nonce))
		secrets["a refused hello's proof"] = proof
		v := wire.Version
		if err := ws.WriteJSON(wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: stranger.PublicKeyHex(), Ticket: tk, Nonce: nonce, Proof: proof}); err != nil {
			t.Fatal(err)
		}
		for {
			if _, _, err := ws.ReadMessage(); err != nil {
				break
			}
		}
		ws.Close()
	}

	p := h.Connect(0x61, nil)
	p.Register("agent")
	caller, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x81))
	signed := func(body string) map[string]string {
		hd := identity.MakePresenterHeader(caller, time.Now().Unix(), []byte(body))
		secrets["a presenter proof"+strconv.Itoa(len(secrets))] = signatureOf(t, hd)
		return map[string]string{"Authorization": "Bearer " + bearer, identity.PresenterHeader: hd, "Content-Type": "application/json"}
	}
	agui := base + "/agui/" + p.Key + "/agent"

	// An AG-UI turn that pauses, and its answer.
	body := fmt.Sprintf(`{"threadId":"t","runId":"r1","state":{},"messages":[{"id":"u1","role":"user","content":%q}],"tools":[],"context":[],"forwardedProps":{}}`, userText)
	var wg sync.WaitGroup
	var stream string
	wg.Go(func() { _, stream = do("POST", agui, body, signed(body)) })
	f := p.Offer()
	thread := *f.ThreadID
	p.Accept(f.RunID)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, f.RunID))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":%q}`, payloadText))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"i1","reason":"approve"}]}}`, thread, f.RunID))
	p.Finish(f.RunID)
	wg.Wait()
	if !strings.Contains(stream, "RUN_FINISHED") {
		t.Fatalf("first turn: %s", stream)
	}
	h.WaitStatus(f.RunID, runstatus.InputRequired)
	body = fmt.Sprintf(`{"threadId":%q,"runId":"r2","messages":[],"resume":[{"interruptId":"i1","status":"resolved","payload":{"note":%q}}]}`, thread, answerText)
	wg.Go(func() { _, stream = do("POST", agui, body, signed(body)) })
	f2 := p.Offer()
	p.Accept(f2.RunID)
	p.Event(f2.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, f2.RunID))
	p.Event(f2.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, f2.RunID))
	p.Finish(f2.RunID)
	wg.Wait()
	h.WaitStatus(f.RunID, runstatus.Completed)

	// A read with a view proof; a stranger's bad request.
	view := identity.MakeViewHeader(caller, thread, time.Now().Unix())
	secrets["a view proof's signature"] = signatureOf(t, view)
	if code, b := do("GET", base+"/threads/"+thread, "", map[string]string{"Funduq-View": view, "Authorization": "Bearer " + bearer}); code != 200 {
		t.Fatalf("thread read: %d %s", code, b)
	}
	if code, _ := do("POST", agui, `{"threadId":`+strangerBody, map[string]string{"Authorization": "Bearer " + bearer}); code != 400 {
		t.Fatalf("a stranger's bad body: %d", code)
	}

	// An A2A task, cancelled while it runs.
	a2aURL := base + "/a2a/" + p.Key + "/agent"
	rpc := func(method string, params any) (int, string) {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
		return do("POST", a2aURL, string(b), signed(string(b)))
	}
	_, sent := rpc("message/send", map[string]any{"configuration": map[string]any{"blocking": false},
		"message": map[string]any{"messageId": "m1", "role": "user", "kind": "message", "parts": []any{map[string]any{"kind": "text", "text": a2aText}}}})
	f3 := p.Offer()
	p.Accept(f3.RunID)
	p.Event(f3.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *f3.ThreadID, f3.RunID))
	h.WaitStatus(f3.RunID, runstatus.Running)
	var task struct {
		Result struct {
			ID string `json:"id"`
		} `json:"result"`
	}
	_ = json.Unmarshal([]byte(sent), &task)
	if code, b := rpc("tasks/cancel", map[string]any{"id": task.Result.ID}); code != 200 {
		t.Fatalf("cancel: %d %s", code, b)
	}
	var cf wire.Cancel
	p.Expect(wire.TypeCancel, &cf)
	p.Finish(f3.RunID) // the provider stops without RUN_FINISHED
	h.WaitStatus(f3.RunID, runstatus.Cancelled)

	// A KYOK completion: an LLM provider attached, a token minted for a
	// run, the agent's signed call answered.
	llmSigner, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x91))
	lws := attachLLM(t, h, llmSigner, ticket(llmSigner.PublicKeyHex()), "gpt-log")
	runID, _ := h.Door(p.Key, "agent", "", "translate this")
	sealed, err := kyok.Seal([]byte(tokenSecret), kyok.Binding{LLMProviderKey: llmSigner.PublicKeyHex(), LLMName: "gpt-log"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.SetKyokBinding(context.Background(), runID, llmSigner.PublicKeyHex(), "gpt-log", sealed); err != nil {
		t.Fatal(err)
	}
	f4 := p.Offer()
	p.Accept(f4.RunID)
	h.WaitStatus(runID, runstatus.Running)
	agentSigner, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x61))
	token := identity.MintKyokToken([]byte(tokenSecret), identity.NewKyokClaims(runID, p.Key, "agent", time.Now()))
	secrets["a KYOK token"] = token
	if i := strings.LastIndex(token, "."); i > 0 {
		secrets["a KYOK token's signature"] = token[i+1:]
	}
	kbody := fmt.Sprintf(`{"model":"gpt-log","stream":true,"messages":[{"role":"user","content":%q}]}`, kyokText)
	ts := time.Now().Unix()
	ksig := agentSigner.Sign(identity.KyokCallPayload(token, ts, []byte(kbody)))
	secrets["a KYOK call's signature"] = ksig
	var kyokAnswer string
	var kcode int
	wg.Go(func() {
		kcode, kyokAnswer = do("POST", base+kyokdoor.Path, kbody, map[string]string{"Authorization": "Bearer " + token,
			"Content-Type": "application/json", kyokdoor.HeaderTimestamp: strconv.FormatInt(ts, 10), kyokdoor.HeaderSignature: ksig})
	})
	for {
		_, b, err := lws.ReadMessage()
		if err != nil {
			t.Fatalf("llm link: %v", err)
		}
		if typ, _ := wire.PeekType(b); typ != wire.TypeCompletionRequest {
			continue
		}
		var req wire.KyokCompletionRequest
		_ = json.Unmarshal(b, &req)
		_ = lws.WriteJSON(wire.Chunk{Type: wire.TypeChunk, RequestID: req.RequestID, Data: json.RawMessage(fmt.Sprintf(
			`{"id":"c1","object":"chat.completion.chunk","created":1755300000,"model":"gpt-log","choices":[{"index":0,"delta":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, llmText))})
		_ = lws.WriteJSON(wire.Done{Type: wire.TypeDone, RequestID: req.RequestID})
		break
	}
	wg.Wait()
	if kcode != 200 || !strings.Contains(kyokAnswer, llmText) {
		t.Fatalf("kyok: %d %s", kcode, kyokAnswer)
	}
	p.Finish(f4.RunID)

	// A caller hangs up mid-run; a provider reports for a run it does not
	// hold. Neither is funduq's failure.
	ctx, hangUp := context.WithCancel(context.Background())
	body = fmt.Sprintf(`{"threadId":"t","runId":"r3","messages":[{"id":"u3","role":"user","content":%q}]}`, userText)
	req, _ := http.NewRequestWithContext(ctx, "POST", agui, strings.NewReader(body))
	for k, v := range signed(body) {
		req.Header.Set(k, v)
	}
	var resp *http.Response
	wg.Go(func() {
		var err error
		if resp, err = http.DefaultClient.Do(req); err == nil {
			_, _ = resp.Body.Read(make([]byte, 1))
		}
	})
	f5 := p.Offer()
	p.Accept(f5.RunID)
	p.Event(f5.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, *f5.ThreadID, f5.RunID))
	wg.Wait()
	hangUp()
	if resp != nil {
		resp.Body.Close()
	}
	h.Eventually("the door logs the caller leaving", func() bool { return strings.Contains(dlog.String(), `"caller went away"`) })
	p.Event(f5.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f5.ThreadID, f5.RunID))
	p.Finish(f5.RunID)
	h.WaitStatus(f5.RunID, runstatus.Completed)
	p.Event("run_000000000000000000000000", `{"type":"RUN_STARTED","threadId":"thread_000000000000000000000000","runId":"run_000000000000000000000000"}`)
	p.Expect(wire.TypeError, nil)

	// The provider drops and re-attaches.
	p.Close()
	p = h.Connect(0x61, nil)
	p.Register("agent")

	// The operator console: a login, a script's bearer, a wrong token.
	if code, _ := do("POST", h.URL+"/console/login", "token="+consoleToken, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}); code >= 400 {
		t.Fatalf("console login: %d", code)
	}
	if code, _ := do("GET", h.URL+"/console/api/state", "", map[string]string{"Authorization": "Bearer " + consoleToken}); code != 200 {
		t.Fatalf("console state: %d", code)
	}
	if code, _ := do("GET", h.URL+"/console/api/state", "", map[string]string{"Authorization": "Bearer " + badConsole}); code != 401 {
		t.Fatalf("console, wrong token: %d", code)
	}

	// A storage outage at the doors.
	end := h.Outage(nodetest.DoorApp)
	if code, _ := do("GET", base+"/threads/"+thread, "", map[string]string{"Funduq-View": view}); code != 503 {
		t.Fatalf("outage read: %d", code)
	}
	end()

	// A leader deposed behind its back: its next write finds its epoch
	// stale and it steps down; a standby takes over.
	peer := h.PeerWith("test-node-2", nil, logTo)
	if _, err := h.DB().Exec(context.Background(), `UPDATE broker_leader SET epoch = epoch + 1`); err != nil {
		t.Fatal(err)
	}
	p.Send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "agent"}, {Name: "agent2"}}})
	h.Eventually("the deposed leader steps down", func() bool { return strings.Contains(string(blog.Bytes()), "epoch is stale") })
	h.Shutdown()
	peer.Eventually("the standby leads", peer.Ready)
	peer.Shutdown()
	stopDoors()

	runs := map[string]bool{f.RunID: true, f3.RunID: true, runID: true, f5.RunID: true}
	audit(t, "broker", blog.Bytes(), secrets, runs)
	audit(t, "doors", dlog.Bytes(), secrets, runs)
}

// signatureOf is the signature member of a signed header's JSON.
func signatureOf(t *testing.T, header string) string {
	var v struct {
		Signature string `json:"signature"`
	}
	if err := json.Unmarshal([]byte(header), &v); err != nil || v.Signature == "" {
		t.Fatalf("signed header %q: %v", header, err)
	}
	return v.Signature
}

// attachLLM links an LLM provider on /ws/kyok offering model.
func attachLLM(t *testing.T, h *nodetest.Harness, s *identity.Signer, tk, model string) *websocket.Conn {
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/kyok", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	_ = ws.WriteJSON(wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: s.PublicKeyHex(), Ticket: tk, Nonce: nonce,
		Proof: s.Sign(identity.ProviderConnectPayload(h.Node.FunduqKey(), tk, nonce))})
	if _, b, err := ws.ReadMessage(); err != nil || !bytes.Contains(b, []byte(wire.TypeWelcome)) {
		t.Fatalf("llm welcome: %s %v", b, err)
	}
	_ = ws.WriteJSON(wire.RegisterModels{Type: wire.TypeRegister, Models: []string{model}})
	if _, b, err := ws.ReadMessage(); err != nil || !bytes.Contains(b, []byte(wire.TypeRegistered)) {
		t.Fatalf("llm registered: %s %v", b, err)
	}
	return ws
}

// operatorMustAct are the error lines this day may show: funduq's own
// failures (a deposed leader; storage away is a 503 "request refused").
var operatorMustAct = []string{"write refused: epoch is stale; stepping down", "broker stopped leading"}

// audit reads every line of a component's log and fails on: a line that
// is not JSON with time, level and msg; an error line without its error;
// any secret (as given, base64 or hex); a run named under another key
// than run_id (or its thread under another than thread_id), a run_id
// without its thread_id, a provider named under another key than
// provider_key, a broker line about a run without its epoch.
func audit(t *testing.T, who string, logs []byte, secrets map[string]string, runs map[string]bool) {
	t.Helper()
	forms := map[string]string{}
	for what, s := range secrets {
		forms[s] = what
		forms[base64.StdEncoding.EncodeToString([]byte(s))] = what + " (base64)"
		forms[base64.RawURLEncoding.EncodeToString([]byte(s))] = what + " (base64url)"
		forms[hex.EncodeToString([]byte(s))] = what + " (hex)"
	}
	levels := map[string]int{}
	var errs []string
	sc := bufio.NewScanner(bytes.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		n++
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("%s: a line is not JSON: %s", who, line)
			continue
		}
		lvl, _ := rec["level"].(string)
		msg, _ := rec["msg"].(string)
		if rec["time"] == nil || lvl == "" || msg == "" {
			t.Errorf("%s: a line without time, level or msg: %s", who, line)
		}
		levels[lvl]++
		if (lvl == "WARN" || lvl == "ERROR") && rec["err"] == "context canceled" {
			t.Errorf("%s: a normal stop logged as a %s: %s", who, lvl, line)
		}
		for s, what := range forms {
			if strings.Contains(line, s) {
				t.Errorf("%s: %s in a log line: %s", who, what, line)
			}
		}
		if lvl == "ERROR" {
			errs = append(errs, line)
			if !slices.Contains(operatorMustAct, msg) && !(msg == "request refused" && rec["status"] == 503.0) {
				t.Errorf("%s: an error line for what is not funduq's failure: %s", who, line)
			}
			if rec["err"] == nil {
				t.Errorf("%s: an error line without its error: %s", who, line)
			}
		}
		for k, v := range rec {
			s, ok := v.(string)
			if !ok {
				continue
			}
			if runs[s] && k != "run_id" && k != "parent_run_id" {
				t.Errorf("%s: a run id under %q, not run_id: %s", who, k, line)
			}
			if slices.Contains([]string{"runId", "run", "threadId", "thread", "providerKey", "provider", "key", "public_key"}, k) {
				t.Errorf("%s: key %q, not the codebase's run_id/thread_id/provider_key: %s", who, k, line)
			}
		}
		if who == "broker" && strings.Contains(msg, "epoch") && rec["epoch"] == nil {
			t.Errorf("%s: a line about the epoch without its epoch: %s", who, line)
		}
		if k, dup := duplicateKey(line); dup {
			t.Errorf("%s: key %q twice in one line: %s", who, k, line)
		}
		// The KYOK relay knows a completion's run, not its thread, and
		// leads no run (kyok lines carry request_id).
		kyokLine := rec["request_id"] != nil
		// "run queued" is the door's write; here the test queues a run
		// through the node's own store (nodetest.Harness.Door).
		doorWrite := msg == "run queued"
		if rec["run_id"] != nil && rec["thread_id"] == nil && !kyokLine {
			t.Errorf("%s: a line about a run without its thread_id: %s", who, line)
		}
		if who == "broker" && rec["run_id"] != nil && rec["epoch"] == nil && !kyokLine && !doorWrite {
			t.Errorf("%s: a broker line about a run without its epoch: %s", who, line)
		}
	}
	if n == 0 {
		t.Errorf("%s: no log lines", who)
	}
	var ls []string
	for l, c := range levels {
		ls = append(ls, fmt.Sprintf("%s=%d", l, c))
	}
	sort.Strings(ls)
	t.Logf("%s: %d lines, levels %v", who, n, ls)
	for _, e := range errs {
		t.Logf("%s error line: %s", who, e)
	}
}

// duplicateKey reports a key repeated in one object of a JSON line: most
// log readers keep one of the two values, silently.
func duplicateKey(line string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(line))
	type frame struct {
		obj  bool
		keys map[string]bool
		key  bool // the next token of an object is a key
	}
	var st []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(st) > 0 {
			top = st[len(st)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.obj {
					top.key = true
				}
				st = append(st, &frame{obj: v == '{', keys: map[string]bool{}, key: true})
				continue
			default:
				st = st[:len(st)-1]
				continue
			}
		case string:
			if top != nil && top.obj && top.key {
				if top.keys[v] {
					return v, true
				}
				top.keys[v] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.obj {
			top.key = true
		}
	}
}
