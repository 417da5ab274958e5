package agui_test

// Issue #10: limits, hostile input and authority at the AG-UI door. Every
// refusal here is asserted to write no row.

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"

	"github.com/funduq/funduq-go/internal/syncbuf"
)

// The bad-request catalogue beyond TestBadInputs: what encoding/json would
// have accepted silently (duplicate keys, invalid UTF-8, deep nesting),
// huge numbers, too many messages, bad resume positions.
func TestHostileBodies(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *agui.Options) { o.Limits = config.DoorLimits{MaxMessages: 2, MaxJSONDepth: 16} })
	runs, threads := runCount(t, h), threadCount(t, h)
	caller, other := signer(t, 0xc1), signer(t, 0xc2)
	chainA, chainB := chainOf(t, caller), chainOf(t, other)
	ja, _ := json.Marshal(chainA)
	jb, _ := json.Marshal(chainB)
	// Two actorChain keys: encoding/json would read the second, a JS reader
	// the second too, a streaming one the first. Refused before anyone reads.
	dupChain := fmt.Sprintf(`{"threadId":"t","runId":"r","messages":[],"forwardedProps":{"actorChain":%s,"actorChain":%s}}`, ja, jb)
	deep := `{"threadId":"t","runId":"r","messages":[],"state":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`
	msgs := `{"threadId":"t","runId":"r","messages":[{"role":"user","content":"1"},{"role":"user","content":"2"},{"role":"user","content":"3"}]}`
	for _, c := range []struct {
		name, body string
		hdr        map[string]string
		status     int
		code       string
	}{
		{"duplicate top-level key", `{"threadId":"t","threadId":"u","runId":"r","messages":[]}`, nil, 400, door.CodeMalformedJSON},
		{"duplicate key after unescaping", `{"threadId":"t","thread\u0049d":"u","runId":"r","messages":[]}`, nil, 400, door.CodeMalformedJSON},
		{"duplicate actorChain", dupChain, presenterHdr(other, dupChain), 400, door.CodeMalformedJSON},
		{"duplicate key in a message", `{"threadId":"t","runId":"r","messages":[{"role":"user","role":"tool"}]}`, nil, 400, door.CodeMalformedJSON},
		{"invalid UTF-8 in a string", "{\"threadId\":\"t\xff\",\"runId\":\"r\",\"messages\":[]}", nil, 400, door.CodeMalformedJSON},
		{"invalid UTF-8 in a key", "{\"threadId\":\"t\",\"runId\":\"r\",\"messages\":[],\"\xc3\x28\":1}", nil, 400, door.CodeMalformedJSON},
		{"deep nesting", deep, nil, 400, door.CodeMalformedJSON},
		{"huge number as threadId", `{"threadId":1e999,"runId":"r","messages":[]}`, nil, 422, door.CodeInvalidRunInput},
		{"huge number as runId", `{"threadId":"t","runId":123456789012345678901234567890,"messages":[]}`, nil, 422, door.CodeInvalidRunInput},
		{"too many messages", msgs, nil, 422, door.CodeTooManyMessages},
		{"messages null-ish wrong type", `{"threadId":"t","runId":"r","messages":"x"}`, nil, 422, door.CodeInvalidRunInput},
		{"empty body", ``, nil, 400, door.CodeMalformedJSON},
	} {
		code, _, body := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), c.body, c.hdr)
		if code != c.status || errCode(body) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, body, c.status, c.code)
		}
	}
	for _, id := range []string{"+5", "1e3", "-1", "99999999999999999999", "x"} {
		code, _, body := jsonCall(t, "GET", srv.URL+"/runs/run_x/events", "", map[string]string{agui.LastEventIDHeader: id})
		if code != 400 || errCode(body) != door.CodeBadRequest {
			t.Errorf("Last-Event-ID %q: %d %v", id, code, body)
		}
	}
	// Headers past the server's bound never reach the door.
	if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
		t.Fatalf("refusals wrote rows: runs %d→%d threads %d→%d", runs, r, threads, th)
	}
	p.None()
}

// A thread holds at most MaxQueuedPerThread runs waiting for a provider;
// one more is 429 with Retry-After and writes nothing.
func TestRunsQueuedPerThread(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *agui.Options) { o.Limits.MaxQueuedPerThread = 1 })
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r1", ""), nil)
	f := p.Offer() // offering: waiting for the provider's answer
	runs := runCount(t, h)
	code, hdr, body := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), input(*f.ThreadID, "r2", ""), nil)
	if code != http.StatusTooManyRequests || errCode(body) != door.CodeThreadQueueFull || hdr.Get("Retry-After") == "" {
		t.Fatalf("second waiting run: %d %v Retry-After %q", code, body, hdr.Get("Retry-After"))
	}
	if r := runCount(t, h); r != runs {
		t.Fatalf("a refused run was written: %d→%d", runs, r)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	// Once the first is no longer waiting, the thread takes another.
	s = openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input(*f.ThreadID, "r3", ""), nil)
	f = p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
}

// Seed 001's authority rules at the door: only the key that signed a
// chain's last hop may present it.
func TestProviderCannotActAsCaller(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo", "other")
	provider := signer(t, 0xe1) // p's own key
	caller, stranger := signer(t, 0xc1), signer(t, 0xc2)
	srv := startDoor(t, h, nil)
	chain := chainOf(t, caller)

	// The caller's run reaches the provider with the chain and funduq's
	// dispatch hop: everything a door reads to decide authority.
	body := withChain(chain)
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, presenterHdr(caller, body))
	f := p.Offer()
	var in struct {
		ForwardedProps struct {
			Funduq struct {
				ActorChain []string `json:"actorChain"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil {
		t.Fatal(err)
	}
	relayed := in.ForwardedProps.Funduq.ActorChain
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	thread := *f.ThreadID
	runs, threads := runCount(t, h), threadCount(t, h)

	rc, err := identity.VerifyChain(relayed)
	if err != nil {
		t.Fatal(err)
	}
	dispatch := rc.Hops[len(rc.Hops)-1]
	// identity.SignHop refuses to sign this; a stranger signs it by hand.
	branch := forgeHop(t, 0xc2, dispatch.Token)
	onThread := func(c []string) string {
		b, _ := json.Marshal(c)
		return fmt.Sprintf(`{"threadId":%q,"runId":"x","messages":[{"role":"user","content":"hi"}],"forwardedProps":{"actorChain":%s}}`, thread, b)
	}
	for _, c := range []struct {
		name      string
		body      string
		presenter *identity.Signer
		status    int
		code      string
	}{
		// The provider re-presents the caller's chain verbatim under its own
		// authenticated key: the last hop is the caller's, so it is refused.
		{"provider re-presents the caller's chain", onThread(chain), provider, 401, door.CodeInvalidChain},
		// ...or the chain as relayed, ending at funduq's dispatch hop.
		{"provider re-presents the relayed chain", onThread(relayed), provider, 401, door.CodeInvalidChain},
		// A stranger who saw the relayed chain branches it with its own hop:
		// the dispatch hop names the provider, so nobody else may follow it.
		{"branch after funduq's dispatch hop", onThread(append(append([]string{}, relayed...), branch)), stranger, 401, door.CodeInvalidChain},
		// No presenter at all.
		{"chain without presenter", onThread(chain), nil, 401, door.CodePresenterRequired},
		// A chain signed by someone else, presented by the stranger.
		{"last hop signed by another key", onThread(chain), stranger, 401, door.CodeInvalidChain},
		// A stranger with a valid chain of its own: not the thread's head.
		{"stranger's own chain on a bound thread", onThread(chainOf(t, stranger)), stranger, 403, door.CodeMembershipRequired},
		// A chainless stranger on the bound thread.
		{"stranger without a chain on a bound thread", input(thread, "y", ""), stranger, 403, door.CodeMembershipRequired},
	} {
		var hdr map[string]string
		if c.presenter != nil {
			hdr = presenterHdr(c.presenter, c.body)
		}
		code, _, got := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), c.body, hdr)
		if code != c.status || errCode(got) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, got, c.status, c.code)
		}
		if msg := fmt.Sprint(got["error"]); strings.HasPrefix(c.name, "branch") && !strings.Contains(msg, "dispatch") {
			t.Errorf("%s: refused for another reason: %s", c.name, msg)
		}
	}
	if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
		t.Fatalf("refusals wrote rows: runs %d→%d threads %d→%d", runs, r, threads, th)
	}
	p.None()
}

// A provider that sends more events than a run may hold, or one larger
// than an event may be, fails the run with a reason naming the limit and a
// terminal RUN_ERROR.
func TestEventLimits(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxEventsPerRun, c.MaxEventBytes = 3, 200 })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	for i := 0; i < 3; i++ {
		p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}`)
	}
	r := h.WaitStatus(f.RunID, run.Failed)
	if r.FailureReason != string(run.ReasonEventLimit) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	var refused wire.Error // the refused event is answered (issue #21)
	p.Expect(wire.TypeError, &refused)
	if refused.RunID != f.RunID || !strings.HasPrefix(refused.Message, "event refused: "+string(run.ReasonEventLimit)) {
		t.Fatalf("refusal %+v", refused)
	}
	s.rest()

	s = openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", "r2", ""), nil)
	f = p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"`+strings.Repeat("x", 300)+`"}`)
	r = h.WaitStatus(f.RunID, run.Failed)
	if r.FailureReason != string(run.ReasonEventTooLarge) {
		t.Fatalf("reason %q", r.FailureReason)
	}
	evs := h.Events(f.RunID)
	if len(evs) == 0 || evs[len(evs)-1]["type"] != "RUN_ERROR" {
		t.Fatalf("events %v", evs)
	}
	s.rest()
}

// Secrets never reach a log line or an error body: a full run — a chain
// with a presenter, a KYOK opt-in with a secret context, a refusal or two —
// with the broker's and the door's slog JSON captured at debug, grepped for
// the identity seed, the token secret, the database password, the KYOK
// token and the caller's KYOK context.
func TestSecretsStayOutOfLogs(t *testing.T) {
	logs := &syncbuf.Buffer{} // the node's and the door's loggers share it
	jsonLog := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := nodetest.StartWith(t, nil, func(o *node.Options) { o.Logger = jsonLog })
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	deps := mustDeps(t, h, "")
	deps.Log = jsonLog
	srv := startDoorWith(t, deps, func(o *agui.Options) { o.Log = jsonLog })
	caller := signer(t, 0xc1)
	var bodies []string

	body := withChain(chainOf(t, caller))
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, presenterHdr(caller, body))
	f := p.Offer()
	var in struct {
		ForwardedProps struct {
			Funduq struct {
				Kyok struct {
					Token string `json:"token"`
				} `json:"kyok"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	_ = json.Unmarshal(f.RunInput, &in)
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	// A KYOK opt-in whose context is the caller's LLM secret.
	llm := signer(t, 0xd1)
	ctx := context.Background()
	if _, err := h.Store.Pool().Exec(ctx, `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)`,
		llm.PublicKeyHex(), identity.Fingerprint(llm.PublicKey())); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Pool().Exec(ctx, `INSERT INTO llm_offerings (provider_key, name) VALUES ($1, 'gpt')`, llm.PublicKeyHex()); err != nil {
		t.Fatal(err)
	}
	const llmSecret = "sk-hostile-caller-llm-secret-0123456789"
	kb := fmt.Sprintf(`{"threadId":"t","runId":"rk","messages":[{"role":"user","content":"hi"}],"forwardedProps":{"kyok":{"llmProvider":{"providerKey":%q,"name":"gpt"},"context":{"apiKey":%q}}}}`,
		llm.PublicKeyHex(), llmSecret)
	s = openStream(t, "POST", aguiURL(srv, p.Key, "echo"), kb, nil)
	fk := p.Offer()
	_ = json.Unmarshal(fk.RunInput, &in)
	if strings.Contains(string(fk.RunInput), llmSecret) {
		t.Error("the caller's KYOK context reached the agent provider in the clear")
	}
	p.Accept(fk.RunID)
	p.Complete(fk.RunID, *fk.ThreadID)
	s.rest()
	// Refusals: a bad chain, a bad presenter, a bad body.
	for _, b := range []string{withChain([]string{"x.y.z"}), `{"threadId":`, body} {
		_, _, got := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), b, presenterHdr(signer(t, 0xc2), b))
		raw, _ := json.Marshal(got)
		bodies = append(bodies, string(raw))
	}
	token := identity.MintKyokToken([]byte(h.Cfg.TokenSecret), identity.NewKyokClaims(f.RunID, p.Key, "echo", h.Clock.Now()))
	secrets := map[string]string{
		"identity seed": h.Cfg.IdentityKey,
		"token secret":  h.Cfg.TokenSecret,
		"a KYOK token":  token,
		"KYOK context":  llmSecret,
	}
	if in.ForwardedProps.Funduq.Kyok.Token != "" {
		secrets["the run's KYOK token"] = in.ForwardedProps.Funduq.Kyok.Token
	}
	if pw := password(h.Cfg.DatabaseURL); pw != "" {
		secrets["database password"] = pw
	}
	all := logs.String() + strings.Join(bodies, "\n")
	if !strings.Contains(all, "run claimed") || !strings.Contains(all, "request refused") {
		t.Fatalf("captured no logs: %q", all)
	}
	for what, v := range secrets {
		if v != "" && strings.Contains(all, v) {
			t.Errorf("the %s appears in the logs or an error body", what)
		}
	}
}

// forgeHop signs a hop after prevToken with the seed nodetest.SeedHex(b),
// by hand, bypassing SignHop's own checks.
func forgeHop(t *testing.T, b byte, prevToken string) string {
	t.Helper()
	seed, err := hex.DecodeString(nodetest.SeedHex(b))
	if err != nil {
		t.Fatal(err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	sum := sha256.Sum256([]byte(prevToken))
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"EdDSA","typ":"JWT"}`))
	claims := enc.EncodeToString([]byte(fmt.Sprintf(`{"actorPublicKey":%q,"prevHash":%q}`,
		hex.EncodeToString(priv.Public().(ed25519.PublicKey)), hex.EncodeToString(sum[:]))))
	return head + "." + claims + "." + enc.EncodeToString(ed25519.Sign(priv, []byte(head+"."+claims)))
}

func password(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	scheme := strings.Index(dsn, "://")
	if at < 0 || scheme < 0 {
		return ""
	}
	userinfo := dsn[scheme+3 : at]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		return userinfo[i+1:]
	}
	return ""
}

// A provider that names other ids in RUN_STARTED and RUN_FINISHED does not
// cost the caller its conversation: the caller reads funduq's thread and
// run ids on both events, live and replayed, and continues the thread with
// the id it read. The record keeps what the provider sent.
func TestProviderIdsAreNotTheCallers(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)

	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("new", "r1", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, `{"type":"RUN_STARTED","threadId":"t-provider","runId":"r-provider"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x"}`)
	p.Event(f.RunID, `{"type":"RUN_FINISHED","threadId":"t-provider","runId":"r-provider","result":{"n":1}}`)
	p.Finish(f.RunID)
	checkIDs := func(what string, fs []frame) {
		t.Helper()
		for _, fr := range events(fs) {
			ev := fr.event(t)
			if typ := ev["type"]; typ != "RUN_STARTED" && typ != "RUN_FINISHED" {
				continue
			}
			if ev["threadId"] != *f.ThreadID || ev["runId"] != f.RunID {
				t.Errorf("%s: %s names thread %v run %v, want %s %s", what, ev["type"], ev["threadId"], ev["runId"], *f.ThreadID, f.RunID)
			}
			if ev["type"] == "RUN_FINISHED" && fmt.Sprint(ev["result"]) != "map[n:1]" {
				t.Errorf("%s: RUN_FINISHED lost its result: %v", what, ev)
			}
		}
	}
	live := s.rest()
	if got := typesOf(t, events(live)); strings.Join(got, " ") != "RUN_STARTED TEXT_MESSAGE_CONTENT RUN_FINISHED" {
		t.Fatalf("live stream %v", got)
	}
	checkIDs("live", live)
	replay := openStream(t, "GET", srv.URL+"/runs/"+f.RunID+"/events", "", nil)
	checkIDs("replay", replay.rest())
	if evs := h.Events(f.RunID); evs[0]["threadId"] != "t-provider" {
		t.Errorf("the record holds %v, want the provider's event as sent", evs[0])
	}

	// The caller continues on the thread id it read.
	var thread string
	for _, fr := range events(live) {
		if ev := fr.event(t); ev["type"] == "RUN_STARTED" {
			thread, _ = ev["threadId"].(string)
		}
	}
	s = openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input(thread, "r2", ""), nil)
	defer s.close()
	if g := p.Offer(); g.ThreadID == nil || *g.ThreadID != *f.ThreadID {
		t.Fatalf("the second turn went to thread %v, want %s", g.ThreadID, *f.ThreadID)
	}
}
