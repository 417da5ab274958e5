package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// Bad input gets the one error envelope with the right status, never a 500
// and never a half-written run.
func TestBadInputs(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo", "other")
	srv := startDoor(t, h, nil)

	// A thread of another agent, to be named foreign.
	s := openStream(t, "POST", aguiURL(srv, p.Key, "other"), input("t", "r", ""), nil)
	f := p.Offer()
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	runs, threads := runCount(t, h), threadCount(t, h)

	caller := signer(t, 0xc1)
	chain := chainOf(t, caller)
	big := `{"threadId":"t","runId":"r","messages":[{"role":"user","content":"` + strings.Repeat("x", agui.DefaultMaxBody) + `"}]}`
	for _, c := range []struct {
		name, path, body string
		hdr              map[string]string
		status           int
		code             string
	}{
		{"malformed JSON", "echo", `{"threadId":`, nil, 400, door.CodeMalformedJSON},
		{"not an object", "echo", `[1,2]`, nil, 422, door.CodeInvalidRunInput},
		{"threadId missing", "echo", `{"runId":"r","messages":[]}`, nil, 422, door.CodeInvalidRunInput},
		{"threadId a number", "echo", `{"threadId":1,"runId":"r","messages":[]}`, nil, 422, door.CodeInvalidRunInput},
		{"messages an object", "echo", `{"threadId":"t","runId":"r","messages":{}}`, nil, 422, door.CodeInvalidRunInput},
		{"message without role", "echo", `{"threadId":"t","runId":"r","messages":[{"content":"x"}]}`, nil, 422, door.CodeInvalidRunInput},
		{"tool message without toolCallId", "echo", `{"threadId":"t","runId":"r","messages":[{"role":"tool","content":"x"}]}`, nil, 422, door.CodeInvalidRunInput},
		{"tools of strings", "echo", `{"threadId":"t","runId":"r","messages":[],"tools":["x"]}`, nil, 422, door.CodeInvalidRunInput},
		{"resume bad status", "echo", `{"threadId":"t","runId":"r","messages":[],"resume":[{"interruptId":"i","status":"maybe"}]}`, nil, 422, door.CodeInvalidRunInput},
		{"parentRunId a number", "echo", `{"threadId":"t","runId":"r","messages":[],"parentRunId":3}`, nil, 422, door.CodeInvalidRunInput},
		{"bad kyok opt-in", "echo", input("t", "r", "") + ``, nil, 0, ""}, // placeholder replaced below
		{"oversize body", "echo", big, nil, 413, door.CodeBodyTooLarge},
		{"unknown agent", "nobody", input("t", "r", ""), nil, 404, door.CodeAgentNotFound},
		{"bad provider", "", input("t", "r", ""), nil, 404, door.CodeAgentNotFound},
		{"foreign thread", "echo", input(*f.ThreadID, "r9", ""), nil, 409, door.CodeThreadMismatch},
		{"chain without presenter", "echo", withChain(chain), nil, 401, door.CodePresenterRequired},
		{"chain not strings", "echo", `{"threadId":"t","runId":"r","messages":[],"forwardedProps":{"actorChain":"x"}}`,
			presenterHdr(caller, `{"threadId":"t","runId":"r","messages":[],"forwardedProps":{"actorChain":"x"}}`), 401, door.CodeInvalidChain},
		{"chain forged", "echo", withChain([]string{chain[0] + "x"}), presenterHdr(caller, withChain([]string{chain[0] + "x"})), 401, door.CodeInvalidChain},
		{"presenter not the last hop", "echo", withChain(chain), presenterHdr(signer(t, 0xc2), withChain(chain)), 401, door.CodeInvalidChain},
		{"presenter over another body", "echo", withChain(chain), presenterHdr(caller, "{}"), 401, door.CodePresenterRequired},
		{"unknown LLM offering", "echo", kyokBody(p.Key, "gpt"), nil, 404, door.CodeLLMNotFound},
		{"bad idempotency key", "echo", input("t", "r", ""), map[string]string{agui.IdempotencyHeader: strings.Repeat("k", 300)}, 400, door.CodeBadRequest},
	} {
		if c.status == 0 {
			c.body = `{"threadId":"t","runId":"r","messages":[],"forwardedProps":{"kyok":{"llmProvider":{"providerKey":1}}}}`
			c.status, c.code = 422, door.CodeInvalidRunInput
		}
		path := aguiURL(srv, p.Key, c.path)
		if c.name == "bad provider" {
			path = srv.URL + "/agui/not-a-key/echo"
		}
		code, _, body := jsonCall(t, "POST", path, c.body, c.hdr)
		if code != c.status || errCode(body) != c.code {
			t.Errorf("%s: %d %v, want %d %s", c.name, code, body, c.status, c.code)
		}
	}
	// Wrong method and unknown route use the envelope too.
	if code, _, body := jsonCall(t, "GET", aguiURL(srv, p.Key, "echo"), "", nil); code != 405 || errCode(body) != door.CodeMethodNotAllowed {
		t.Errorf("GET on the POST route: %d %v", code, body)
	}
	if code, _, body := jsonCall(t, "GET", srv.URL+"/threads/thread_nope", "", nil); code != 404 || errCode(body) != door.CodeThreadNotFound {
		t.Errorf("unknown thread: %d %v", code, body)
	}
	if code, _, body := jsonCall(t, "GET", srv.URL+"/nowhere", "", nil); code != 404 || errCode(body) != door.CodeNotFound {
		t.Errorf("unknown route: %d %v", code, body)
	}
	if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
		t.Fatalf("refusals wrote rows: runs %d→%d threads %d→%d", runs, r, threads, th)
	}
	p.None()
}

func signer(t *testing.T, b byte) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(b))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// chainOf is a one-hop chain signed by s (head = presenter = s).
func chainOf(t *testing.T, s *identity.Signer) []string {
	t.Helper()
	hop, err := identity.SignHop(s, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return []string{hop.Token}
}

func withChain(chain []string) string {
	b, _ := json.Marshal(chain)
	return fmt.Sprintf(`{"threadId":"t","runId":"r","messages":[{"role":"user","content":"hi"}],"forwardedProps":{"actorChain":%s,"funduq":{"forged":true}}}`, b)
}

func withChainOn(thread string, chain []string) string {
	b, _ := json.Marshal(chain)
	return fmt.Sprintf(`{"threadId":%q,"runId":"r2","messages":[{"role":"user","content":"hi"}],"forwardedProps":{"actorChain":%s}}`, thread, b)
}

func presenterHdr(s *identity.Signer, body string) map[string]string {
	return map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(s, time.Now().Unix(), []byte(body))}
}

func kyokBody(key, name string) string {
	return fmt.Sprintf(`{"threadId":"t","runId":"r","messages":[{"role":"user","content":"hi"}],"forwardedProps":{"kyok":{"llmProvider":{"providerKey":%q,"name":%q}},"context":"mine"}}`, key, name)
}

// An actor chain is accepted with either presenter seat; the agent receives
// the chain plus funduq's dispatch hop; the thread is bound to the chain's
// head, and a chainless caller may not write into it.
func TestActorChain(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	caller := signer(t, 0xc1)
	seat := ""
	srv := startDoor(t, h, func(o *agui.Options) {
		o.AuthorizedKey = func(*http.Request) string { return seat }
	})
	chain := chainOf(t, caller)

	// Seat 2: the Funduq-Presenter header.
	body := withChain(chain)
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), body, presenterHdr(caller, body))
	f := p.Offer()
	var in struct {
		ForwardedProps struct {
			ActorChain []string `json:"actorChain"`
			Funduq     struct {
				Caller     map[string]any `json:"caller"`
				ActorChain []string       `json:"actorChain"`
				Forged     any            `json:"forged"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	if err := json.Unmarshal(f.RunInput, &in); err != nil {
		t.Fatal(err)
	}
	fu := in.ForwardedProps.Funduq
	if len(fu.ActorChain) != 2 || fu.ActorChain[0] != chain[0] || fu.Forged != nil || fu.Caller["headKey"] != caller.PublicKeyHex() {
		t.Fatalf("forwardedProps %s", f.RunInput)
	}
	relayed, err := identity.VerifyChain(fu.ActorChain)
	if err != nil || relayed.Hops[1].ActorKey != h.Node.FunduqKey() || relayed.Hops[1].DispatchedTo.ProviderKey != p.Key {
		t.Fatalf("relayed chain: %v %+v", err, relayed)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
	if r := h.Run(f.RunID); !strings.Contains(string(r.ActorChain), chain[0]) {
		t.Fatalf("stored chain %s", r.ActorChain)
	}
	th, err := h.Store.GetThread(context.Background(), *f.ThreadID)
	if err != nil || th.HeadKey != caller.PublicKeyHex() {
		t.Fatalf("thread %+v %v", th, err)
	}

	// A chainless caller may not write into the bound thread.
	code, _, got := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), input(*f.ThreadID, "r3", ""), nil)
	if code != 403 || errCode(got) != door.CodeMembershipRequired {
		t.Fatalf("chainless write into a bound thread: %d %v", code, got)
	}

	// Seat 1: an authorizer's key, no header. The same head continues.
	seat = caller.PublicKeyHex()
	s = openStream(t, "POST", aguiURL(srv, p.Key, "echo"), withChainOn(*f.ThreadID, chain), nil)
	f2 := p.Offer()
	if *f2.ThreadID != *f.ThreadID {
		t.Fatalf("thread %s", *f2.ThreadID)
	}
	p.Accept(f2.RunID)
	p.Complete(f2.RunID, *f2.ThreadID)
	s.rest()
}

// A KYOK opt-in naming a registered offering mints a token bound to the run
// and the agent; the opt-in stays in the bag.
func TestKyokOptIn(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	llm := signer(t, 0xd1)
	pub := llm.PublicKey()
	ctx := context.Background()
	if _, err := h.Store.Pool().Exec(ctx, `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)`,
		llm.PublicKeyHex(), identity.Fingerprint(pub)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Store.Pool().Exec(ctx, `INSERT INTO llm_offerings (provider_key, name) VALUES ($1, 'gpt')`, llm.PublicKeyHex()); err != nil {
		t.Fatal(err)
	}
	srv := startDoor(t, h, nil)
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), kyokBody(llm.PublicKeyHex(), "gpt"), nil)
	f := p.Offer()
	var in struct {
		ForwardedProps struct {
			Kyok   json.RawMessage `json:"kyok"`
			Funduq struct {
				Kyok struct {
					Token string `json:"token"`
				} `json:"kyok"`
			} `json:"funduq"`
		} `json:"forwardedProps"`
	}
	_ = json.Unmarshal(f.RunInput, &in)
	claims, err := identity.VerifyKyokToken([]byte(h.Cfg.TokenSecret), in.ForwardedProps.Funduq.Kyok.Token, time.Now())
	if err != nil || claims.RunID != f.RunID || claims.ProviderKey != p.Key || claims.AgentName != "echo" {
		t.Fatalf("token: %v %+v (input %s)", err, claims, f.RunInput)
	}
	if !strings.Contains(string(in.ForwardedProps.Kyok), `"gpt"`) {
		t.Fatalf("the opt-in left the bag: %s", f.RunInput)
	}
	p.Accept(f.RunID)
	p.Complete(f.RunID, *f.ThreadID)
	s.rest()
}

// With PostgreSQL unreachable the door answers 503 with Retry-After within
// a second or two (a hang guard bounds the wait; the status is the check).
func TestDatabaseUnreachable(t *testing.T) {
	h := nodetest.Start(t, nil)
	cfg := doorCfg(h)
	cfg.DatabaseURL = "postgres://nobody@127.0.0.1:1/none?sslmode=disable"
	deps, err := door.Connect(cfg, door.ConnectOptions{RedisPrefix: h.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	srv := startDoorWith(t, deps, nil)
	key := strings.Repeat("ab", 32)
	for _, c := range []struct{ method, url, body string }{
		{"POST", aguiURL(srv, key, "echo"), input("t", "r", "")},
		{"GET", srv.URL + "/threads/thread_x", ""},
		{"GET", srv.URL + "/runs/run_x/events", ""},
		{"GET", srv.URL + "/agents", ""},
	} {
		code, hdr, body := jsonCall(t, c.method, c.url, c.body, nil)
		if code != 503 || hdr.Get("Retry-After") == "" || errCode(body) != door.CodeUnavailable {
			t.Errorf("%s %s: %d %v %v", c.method, c.url, code, hdr, body)
		}
		if strings.Contains(fmt.Sprint(body), "127.0.0.1") {
			t.Errorf("the driver's message leaked: %v", body)
		}
	}
}
