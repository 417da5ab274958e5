package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/browsertest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/chat"
	"github.com/funduq/funduq-go/provider"
)

// startDoors runs the local doors server against h until the test ends and
// returns its base URL.
func startDoors(t *testing.T, h *nodetest.Harness) string {
	t.Helper()
	base, _ := startDoorsTo(t, h, io.Discard, "error")
	return base
}

// startDoorsTo is startDoors logging at level to w; stop ends the server
// (and waits for it) before the test does.
func startDoorsTo(t *testing.T, h *nodetest.Harness, w io.Writer, level string) (base string, stop func()) {
	t.Helper()
	environ := []string{
		"FUNDUQ_DATABASE_URL=" + h.Cfg.DatabaseURL, "FUNDUQ_REDIS_URL=" + h.Cfg.RedisURL,
		"FUNDUQ_IDENTITY_KEY=" + h.Cfg.IdentityKey, "FUNDUQ_TOKEN_SECRET=" + h.Cfg.TokenSecret,
		"FUNDUQ_DOORS_ADDR=127.0.0.1:0", "FUNDUQ_LOG_LEVEL=" + level,
	}
	redisPrefix = h.Prefix
	t.Cleanup(func() { redisPrefix = "" }) // after stop: cleanups run last first
	return serveDoors(t, environ, w)
}

// serveDoors runs the local server (run) on environ, logging to w, until
// stop (or the test's end), and returns its base URL; stop waits for it and
// fails the test on a non-zero exit code.
func serveDoors(t *testing.T, environ []string, w io.Writer) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	var wg sync.WaitGroup
	code := -1
	wg.Go(func() { code = run(ctx, environ, w, func(a string) { addr <- a }) })
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if code != 0 {
				t.Errorf("doors exit code %d", code)
			}
		})
	}
	t.Cleanup(stop)
	select {
	case a := <-addr:
		return "http://" + a, stop
	case <-time.After(20 * time.Second):
		t.Fatal("the doors did not start")
		return "", stop
	}
}

// startEchoAgent builds and runs examples/echo-agent (the example agent,
// as a process) against h until the test ends, and returns its key.
func startEchoAgent(t *testing.T, h *nodetest.Harness) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "echo-agent")
	gobin := filepath.Join(os.Getenv("GOROOT"), "bin", "go") // go test sets GOROOT
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	// Not with -race: the agent is the system under test, not the test.
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/funduq/funduq-go/examples/echo-agent").CombinedOutput(); err != nil {
		t.Fatalf("go build examples/echo-agent: %v\n%s", err, out)
	}
	seed := nodetest.SeedHex(0xe7)
	keyFile := filepath.Join(dir, "echo.key")
	if err := os.WriteFile(keyFile, []byte(seed+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := identity.NewSignerFromSeedHex(seed)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	cmd := exec.Command(bin)
	cmd.Env = []string{"FUNDUQ_BROKER_URL=" + h.URL, "FUNDUQ_AGENT_KEY_FILE=" + keyFile, "FUNDUQ_PUBLIC_KEY=" + h.Node.FunduqKey()}
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("echo-agent: %v\n%s", err, logs.String())
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("echo-agent did not stop on SIGTERM\n%s", logs.String())
		}
	})
	key := signer.PublicKeyHex()
	h.Eventually("the echo agent registers", func() bool {
		return slices.Contains(h.Node.Broker.Snapshot().Served, broker.AgentRef{Key: key, Name: "echo"})
	})
	return key
}

const askReason = `May I send <b>the email</b>?`

// approver asks first (an interrupt), then answers with what it was told.
func approver(ctx context.Context, r *provider.Run) error {
	var in struct {
		Resume []struct {
			InterruptID string          `json:"interruptId"`
			Status      string          `json:"status"`
			Payload     json.RawMessage `json:"payload"`
		} `json:"resume"`
	}
	_ = json.Unmarshal(r.Input, &in)
	if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
		return err
	}
	if len(in.Resume) == 0 {
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID,
			"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "ask-1", "reason": askReason}}}})
	}
	text := fmt.Sprintf("%s %s: %s", in.Resume[0].InterruptID, in.Resume[0].Status, in.Resume[0].Payload)
	if err := r.EmitText(ctx, r.ID+"-answer", text); err != nil {
		return err
	}
	return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
}

// slow streams half its answer, then waits for the test's gate.
func slow(gate <-chan struct{}) provider.Handler {
	return func(ctx context.Context, r *provider.Run) error {
		for _, ev := range []map[string]any{
			{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID},
			{"type": "TEXT_MESSAGE_START", "messageId": "s1", "role": "assistant"},
			{"type": "TEXT_MESSAGE_CONTENT", "messageId": "s1", "delta": "part one, "},
		} {
			if err := r.Emit(ctx, ev); err != nil {
				return err
			}
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		for _, ev := range []map[string]any{
			{"type": "TEXT_MESSAGE_CONTENT", "messageId": "s1", "delta": "part two"},
			{"type": "TEXT_MESSAGE_END", "messageId": "s1"},
			{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID},
		} {
			if err := r.Emit(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	}
}

// startAgents connects a provider (our SDK) serving approver and slow.
func startAgents(t *testing.T, h *nodetest.Harness, gate <-chan struct{}) string {
	t.Helper()
	return startProvider(t, h, 0xd7, provider.Agent{Name: "approver", Handler: approver}, provider.Agent{Name: "slow", Handler: slow(gate)})
}

// startProvider connects a provider (our SDK) with the key of seed, serving
// agents until the test ends, and returns its key once the last is served.
func startProvider(t *testing.T, h *nodetest.Harness, seed byte, agents ...provider.Agent) string {
	t.Helper()
	signer, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	c, err := provider.New(provider.Config{BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(), ProviderName: "chat-test",
		Logger: slog.New(slog.DiscardHandler), Agents: agents})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("provider: %v", err)
		}
	})
	key := signer.PublicKeyHex()
	last := agents[len(agents)-1].Name
	h.Eventually("the agents register", func() bool {
		return slices.Contains(h.Node.Broker.Snapshot().Served, broker.AgentRef{Key: key, Name: last})
	})
	return key
}

// The page and its assets carry a strict CSP; unknown files are 404.
func TestChatPageHeaders(t *testing.T) {
	srv := chat.Handler()
	mux := http.NewServeMux()
	for _, p := range chat.Patterns() {
		mux.Handle(p, srv)
	}
	for _, p := range []string{"/chat", "/chat/chat.js", "/chat/chat.css"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", p, nil))
		if rec.Code != 200 || rec.Header().Get("Content-Security-Policy") != chat.CSP || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("%s: %d %v", p, rec.Code, rec.Header())
		}
		if body := rec.Body.String(); strings.Contains(body, "innerHTML") || strings.Contains(body, "http://") || strings.Contains(body, "https://") {
			t.Fatalf("%s uses innerHTML or loads from elsewhere", p)
		}
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/chat/chat.html.bak", nil))
	if rec.Code != 404 {
		t.Fatalf("unknown asset: %d", rec.Code)
	}
}

// Every answer under /chat, not only the page and its files, carries the
// page's CSP and the other security headers: a 404 for a file the page
// does not have, and the answer to a method it does not take (a 405 naming
// GET), since a browser may render any of them in the page's place.
func TestChatPageHeadersOnErrors(t *testing.T) {
	base := startDoors(t, nodetest.Start(t, nil))
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/chat/chat.html.bak", 404},
		{"GET", "/chat/", 404},
		{"GET", "/chat/static/chat.js", 404},
		{"POST", "/chat", 405},
		{"DELETE", "/chat/chat.js", 405},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		hd := resp.Header
		if resp.StatusCode != c.status || hd.Get("Content-Security-Policy") != chat.CSP || hd.Get("X-Content-Type-Options") != "nosniff" ||
			hd.Get("X-Frame-Options") != "DENY" || hd.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("%s %s: %d %v", c.method, c.path, resp.StatusCode, hd)
		}
		if c.status == 405 && !strings.Contains(hd.Get("Allow"), "GET") {
			t.Errorf("%s %s: Allow %q", c.method, c.path, hd.Get("Allow"))
		}
	}
}

// selectAgent picks an agent in the page's list.
func selectAgent(b *browsertest.Browser, key, name string) {
	v := strconv.Quote(key + "/" + name)
	b.Eventually("agent "+name+" listed", `[...document.querySelectorAll('#agent option')].some(o => o.value === `+v+`)`)
	browsertest.Eval[bool](b, `(() => { const s = document.getElementById('agent'); s.value = `+v+`; s.dispatchEvent(new Event('change')); return true })()`)
}

func say(b *browsertest.Browser, text string) {
	b.Eventually("the send button is enabled", `!document.getElementById('send').disabled`)
	b.Run("type and send",
		chromedp.SendKeys(chromedp.CSS("#message"), text),
		chromedp.Click(chromedp.CSS("#send")))
}

const lastAgentText = `(() => { const m = [...document.querySelectorAll('#transcript .msg.assistant .text')]; return m.length ? m[m.length - 1].textContent : null })()`

const noMarkup = `document.querySelector('#transcript img, #transcript b, #transcript i, #events img, #events b, #interrupt-list b') === null && window.__pwned === undefined`

// In a real browser, the chat page: completes a turn with the example echo
// agent (examples/echo-agent, run as a process) and shows the reply; shows a message with HTML in it as text; continues
// the thread on the next turn; answers an interrupt; and, reloaded in the
// middle of a run, reconnects with Last-Event-ID and shows the rest of the
// answer once.
func TestChatInBrowser(t *testing.T) {
	h := nodetest.Start(t, nil)
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	defer release()
	echoKey := startEchoAgent(t, h)
	key := startAgents(t, h, gate)
	base := startDoors(t, h)
	b := browsertest.New(t)

	b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
	b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	selectAgent(b, echoKey, "echo")

	// Steps, not subtests: the browser fails the test that made it.
	step := func(name string, fn func()) { t.Log("step: " + name); fn() }
	step("a turn with the echo agent", func() {
		say(b, "hello there")
		b.Eventually("the reply", lastAgentText+` === 'echo: hello there'`)
		b.Eventually("the events streamed in", `document.querySelectorAll('#events li').length >= 5 && document.getElementById('events').textContent.includes('RUN_FINISHED')`)
	})

	hostile := `<img src=x onerror="window.__pwned=1"> and <b>bold</b>`
	step("a message with HTML is shown as text", func() {
		say(b, hostile)
		b.Eventually("the reply", lastAgentText+` === `+strconv.Quote("echo: "+hostile))
		mine := browsertest.Eval[string](b, `[...document.querySelectorAll('#transcript .msg.user .text')].pop().textContent`)
		if mine != hostile {
			t.Fatalf("my message shown as %q", mine)
		}
		if !browsertest.Eval[bool](b, noMarkup) {
			t.Fatal("a message was rendered as markup")
		}
		// Both turns went to one thread, the one RUN_STARTED named.
		thread := browsertest.Eval[string](b, `JSON.parse(localStorage.getItem('funduq.chat.v1')).convs[`+strconv.Quote(echoKey+"/echo")+`].threadId`)
		h.Eventually("both turns on the thread "+thread, func() bool {
			msgs, err := h.Store.ThreadMessages(context.Background(), thread, 10)
			return err == nil && len(msgs) == 4
		})
		b.Screenshot("chat.png")
	})

	step("an interrupt is answered", func() {
		selectAgent(b, key, "approver")
		say(b, "send the report")
		b.Eventually("the question", `!document.getElementById('interrupt').hidden && document.getElementById('interrupt-list').textContent.includes(`+strconv.Quote(askReason)+`)`)
		if !browsertest.Eval[bool](b, noMarkup) {
			t.Fatal("the interrupt was rendered as markup")
		}
		b.Screenshot("chat-interrupt.png")
		b.Eventually("the answer can be sent", `!document.getElementById('interrupt-resolve').disabled`)
		b.Run("answer", chromedp.SetValue(chromedp.CSS("#interrupt-payload"), `{"approved":true}`),
			chromedp.Click(chromedp.CSS("#interrupt-resolve")))
		b.Eventually("the agent got the answer", lastAgentText+` === 'ask-1 resolved: {"approved":true}'`)
		b.Eventually("the question is gone", `document.getElementById('interrupt').hidden`)
	})

	step("a reload reconnects with Last-Event-ID", func() {
		selectAgent(b, key, "slow")
		say(b, "go")
		b.Eventually("the first half", lastAgentText+` === 'part one, '`)
		b.Eventually("the seq is kept", `JSON.parse(localStorage.getItem('funduq.chat.v1')).convs[`+strconv.Quote(key+"/slow")+`].lastSeq >= 3`)
		b.Run("reload", chromedp.Reload())
		b.Eventually("the page reconnects", `document.getElementById('chat-status').textContent.includes('reconnecting to run')`)
		release()
		b.Eventually("the rest of the answer, once", lastAgentText+` === 'part one, part two'`)
		b.Eventually("the run is over", `document.body.dataset.ready === '1' && !document.getElementById('send').disabled`)
		// Only what followed the last seq seen was streamed again, after
		// the door's RUN_STARTED and the open message's TEXT_MESSAGE_START
		// sent again without an id (design.md §The doors, "A resume from
		// inside a message"): the page keeps the message it has.
		if got := browsertest.Eval[string](b, `[...document.querySelectorAll('#events li .type')].map(e => e.textContent.trim()).join(',')`); got != "RUN_STARTED,TEXT_MESSAGE_START,TEXT_MESSAGE_CONTENT,TEXT_MESSAGE_END,RUN_FINISHED" {
			t.Fatalf("events after the reload: %s", got)
		}
	})
	b.CheckClean()
}

// A hostile agent's question is its own text, of any length: the page still
// shows the conversation and keeps the answer buttons in view.
func TestChatLongQuestionInBrowser(t *testing.T) {
	h := nodetest.Start(t, nil)
	reason := strings.Repeat("Q", 20000)
	key := startProvider(t, h, 0xd8, provider.Agent{Name: "asker", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
			return err
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID,
			"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "ask-1", "reason": reason}}}})
	}})
	base := startDoors(t, h)
	b := browsertest.New(t)
	b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
	b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	selectAgent(b, key, "asker")
	say(b, "hello")
	b.Eventually("the question", `!document.getElementById('interrupt').hidden && document.getElementById('interrupt-list').textContent.includes('QQQQ')`)
	inView := func(id string) string {
		return `(() => { const r = document.getElementById('` + id + `').getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight })()`
	}
	for _, id := range []string{"interrupt-resolve", "interrupt-cancel", "interrupt-payload"} {
		if !browsertest.Eval[bool](b, inView(id)) {
			t.Errorf("#%s is out of view: %v", id, browsertest.Eval[string](b, `JSON.stringify(document.getElementById('`+id+`').getBoundingClientRect())`))
		}
	}
	if hgt := browsertest.Eval[float64](b, `document.getElementById('transcript').getBoundingClientRect().height`); hgt < 100 {
		t.Errorf("the conversation is squeezed to %vpx", hgt)
	}
	if !t.Failed() {
		b.Screenshot("chat-long-question.png")
	}
	b.CheckClean()
}

// A run's answer belongs to its own conversation: when the user picks
// another agent while a reply is still streaming, the rest of the reply,
// its events and its thread are not shown in the other agent's
// conversation, and they are there on going back.
func TestChatSwitchAgentMidRunInBrowser(t *testing.T) {
	b, key, release := slowReplyHalfway(t)
	defer release()
	selectAgent(b, key, "approver")
	b.Eventually("the other conversation is shown", `document.getElementById('thread-info').textContent === 'a new conversation'`)
	release()
	slowConv := `JSON.parse(localStorage.getItem('funduq.chat.v1')).convs[` + strconv.Quote(key+"/slow") + `]`
	b.Eventually("the slow run is over", `!`+slowConv+`.active && `+slowConv+`.transcript.some(m => m.text === 'part one, part two')`)
	if got := browsertest.Eval[string](b, `document.getElementById('transcript').textContent`); got != "" {
		t.Errorf("the approver's conversation shows %q", got)
	}
	if got := browsertest.Eval[string](b, `document.getElementById('thread-info').textContent`); got != "a new conversation" {
		t.Errorf("the approver's conversation is labelled %q", got)
	}
	if got := browsertest.Eval[string](b, `document.getElementById('events').textContent`); got != "" {
		t.Errorf("the approver's events pane shows %q", got)
	}
	selectAgent(b, key, "slow")
	b.Eventually("the whole answer, back in its conversation", lastAgentText+` === 'part one, part two'`)
	b.CheckClean()
}

// A reply still streaming in a conversation that is not on screen when
// the page reloads is picked up when the user goes back to it.
func TestChatResumeHiddenRunInBrowser(t *testing.T) {
	b, key, release := slowReplyHalfway(t)
	defer release()
	selectAgent(b, key, "approver")
	b.Run("reload", chromedp.Reload())
	b.Eventually("the page is ready again", `document.body.dataset.ready === '1'`)
	release()
	selectAgent(b, key, "slow")
	b.Eventually("the rest of the answer", lastAgentText+` === 'part one, part two'`)
	b.Eventually("the run is over", `!document.getElementById('send').disabled`)
	b.CheckClean()
}

// An agent's reply has no length limit the page can rely on, but the
// page's localStorage has one (about five million characters in Chromium,
// shared with whatever else the origin keeps there): after a reply too
// long to keep whole, the page still keeps every conversation — a later
// turn with another agent is there after a reload, and the long one is not
// streamed again.
func TestChatHugeReplyInBrowser(t *testing.T) {
	h := nodetest.Start(t, nil)
	chunk := strings.Repeat("F", 750_000)
	key := startProvider(t, h, 0xd9, provider.Agent{Name: "approver", Handler: approver}, provider.Agent{Name: "flood", Handler: func(ctx context.Context, r *provider.Run) error {
		evs := []map[string]any{{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID},
			{"type": "TEXT_MESSAGE_START", "messageId": "f1", "role": "assistant"}}
		for range 2 {
			evs = append(evs, map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": "f1", "delta": chunk})
		}
		evs = append(evs, map[string]any{"type": "TEXT_MESSAGE_END", "messageId": "f1"}, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
		for _, ev := range evs {
			if err := r.Emit(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	}})
	base := startDoors(t, h)
	b := browsertest.New(t)
	b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
	b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)
	// Most of the quota taken already, so a reply of 1.5 million characters
	// (cheap for the browser to draw) passes it.
	browsertest.Eval[bool](b, `(localStorage.setItem('other', 'x'.repeat(4000000)), true)`)

	selectAgent(b, key, "flood")
	say(b, "flood me")
	b.Eventually("the run is over", `(document.querySelector('#events li:last-child .type') || {}).textContent === 'RUN_FINISHED ' && !document.getElementById('send').disabled`)
	if n := browsertest.Eval[int](b, `document.querySelector('#transcript .msg.assistant .text').textContent.length`); n != 1_500_000 {
		t.Fatalf("a reply of %d characters", n)
	}
	selectAgent(b, key, "approver")
	say(b, "after the flood")
	b.Eventually("the question", `!document.getElementById('interrupt').hidden`)
	// Until a reload the page shows the long reply whole, though it kept
	// it shortened (and other tabs could have saved meanwhile).
	selectAgent(b, key, "flood")
	b.Eventually("the long reply, whole", `(document.querySelector('#transcript .msg.assistant .text') || {}).textContent.length === 1500000`)
	selectAgent(b, key, "approver")

	b.Run("reload", chromedp.Reload())
	b.Eventually("the page is ready again", `document.body.dataset.ready === '1'`)
	selectAgent(b, key, "approver")
	b.Eventually("the later turn is still there", `document.getElementById('transcript').textContent.includes('after the flood') && !document.getElementById('interrupt').hidden`)
	selectAgent(b, key, "flood")
	b.Eventually("the long reply's conversation", `document.getElementById('transcript').textContent.includes('flood me')`)
	if got := browsertest.Eval[string](b, `document.getElementById('chat-status').textContent + '|' + document.getElementById('events').textContent.slice(0, 200)`); got != "|" {
		t.Errorf("the long reply is streamed again: %q", got)
	}
	b.CheckClean()
}

// slowReplyHalfway opens the chat page on a stack whose "slow" agent
// answers "part one, " and then waits for release before "part two";
// it says "go" to that agent and returns once the first half is shown.
// release (safe to call twice) lets the reply finish.
func slowReplyHalfway(t *testing.T) (b *browsertest.Browser, key string, release func()) {
	t.Helper()
	h := nodetest.Start(t, nil)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	key = startAgents(t, h, gate)
	base := startDoors(t, h)
	b = browsertest.New(t)
	b.Run("open the chat page", chromedp.Navigate(base+"/chat"))
	b.Eventually("the page is ready", `document.body.dataset.ready === '1'`)

	selectAgent(b, key, "slow")
	say(b, "go")
	b.Eventually("the first half", lastAgentText+` === 'part one, '`)
	return b, key, release
}
