package handshake_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/handshake"
	"github.com/funduq/funduq-go/broker-node/tickets"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
)

// guard bounds every wait in these tests; nothing should come near it.
const guard = 10 * time.Second

func signerOf(t *testing.T, b string) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(strings.Repeat(b, 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type outcome struct {
	res handshake.Result
	err error
}

type harness struct {
	t        *testing.T
	funduq   *identity.Signer
	provider *identity.Signer
	store    *tickets.Store
	rdb      *redis.Client
	prefix   string
	url      string
	results  chan outcome
}

type options struct {
	cfg         func(*handshake.Config)
	ctx         context.Context
	afterAccept func(*websocket.Conn) // runs on the server after a good handshake
}

func newHarness(t *testing.T, o options) *harness {
	t.Helper()
	rdb, prefix := redistest.Client(t)
	h := &harness{
		t:        t,
		funduq:   signerOf(t, "b6"),
		provider: signerOf(t, "a5"),
		store:    tickets.New(rdb, prefix),
		rdb:      rdb,
		prefix:   prefix,
		results:  make(chan outcome, 1),
	}
	cfg := handshake.Config{Funduq: h.funduq, Tickets: h.store}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	var up websocket.Upgrader
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			h.results <- outcome{err: err}
			return
		}
		ctx := r.Context()
		if o.ctx != nil {
			ctx = o.ctx
		}
		res, err := handshake.Accept(ctx, conn, cfg)
		if err == nil {
			if o.afterAccept != nil {
				o.afterAccept(conn)
			}
			conn.Close()
		}
		h.results <- outcome{res, err}
	}))
	t.Cleanup(srv.Close)
	h.url = "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws/provider"
	return h
}

func (h *harness) dial() *websocket.Conn {
	h.t.Helper()
	c, resp, err := websocket.DefaultDialer.Dial(h.url, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	h.t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(guard))
	return c
}

func (h *harness) outcome() outcome {
	h.t.Helper()
	select {
	case o := <-h.results:
		return o
	case <-time.After(guard):
		h.t.Fatal("Accept did not return")
		return outcome{}
	}
}

func (h *harness) issue(key string) string {
	h.t.Helper()
	tk, err := h.store.Issue(context.Background(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	return tk
}

func (h *harness) ticketExists(tk string) bool {
	h.t.Helper()
	n, err := h.rdb.Exists(context.Background(), h.prefix+"ticket:"+tk).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	return n == 1
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// hello is a good hello from signer with a freshly issued ticket.
func (h *harness) hello(signer *identity.Signer) map[string]any {
	tk, nonce := h.issue(signer.PublicKeyHex()), randomHex(16)
	return map[string]any{
		"type":              "hello",
		"version":           4,
		"publicKey":         signer.PublicKeyHex(),
		"ticket":            tk,
		"nonce":             nonce,
		"proof":             signer.Sign(identity.ProviderConnectPayload(h.funduq.PublicKeyHex(), tk, nonce)),
		"maxConcurrentRuns": 1,
	}
}

func send(t *testing.T, c *websocket.Conn, v any) {
	t.Helper()
	if err := c.WriteJSON(v); err != nil {
		t.Fatal(err)
	}
}

// expectRefusal reads the client side's close and Accept's error.
func (h *harness) expectRefusal(c *websocket.Conn, reason string) {
	h.t.Helper()
	h.expectClose(c, websocket.ClosePolicyViolation, reason)
	o := h.outcome()
	var re *handshake.RefusedError
	if !errors.Is(o.err, handshake.ErrRefused) || !errors.As(o.err, &re) || re.Reason != reason {
		h.t.Fatalf("Accept err = %v, want RefusedError %q", o.err, reason)
	}
}

func (h *harness) expectClose(c *websocket.Conn, code int, reason string) {
	h.t.Helper()
	mt, msg, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) {
		h.t.Fatalf("client read = %d %q, %v; want a close", mt, msg, err)
	}
	if ce.Code != code || ce.Text != reason {
		h.t.Fatalf("close = %d %q, want %d %q", ce.Code, ce.Text, code, reason)
	}
	if len(ce.Text) > handshake.MaxReasonBytes {
		h.t.Fatalf("close reason is %d bytes", len(ce.Text))
	}
}

func (h *harness) readWelcome(c *websocket.Conn) map[string]string {
	h.t.Helper()
	mt, data, err := c.ReadMessage()
	if err != nil || mt != websocket.TextMessage {
		h.t.Fatalf("first server frame: %d %q, %v", mt, data, err)
	}
	var w map[string]string
	if err := json.Unmarshal(data, &w); err != nil {
		h.t.Fatalf("welcome %q: %v", data, err)
	}
	return w
}

func TestGoodHandshake(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     func(map[string]any)
		wantMax *int
	}{
		{"limit", func(m map[string]any) { m["maxConcurrentRuns"] = 3 }, new(3)},
		{"absent limit", func(m map[string]any) { delete(m, "maxConcurrentRuns") }, nil},
		{"null limit", func(m map[string]any) { m["maxConcurrentRuns"] = nil }, nil},
		{"unknown fields ignored", func(m map[string]any) { m["providerName"] = "x" }, new(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, options{})
			c := h.dial()
			hello := h.hello(h.provider)
			tc.set(hello)
			send(t, c, hello)

			w := h.readWelcome(c)
			if len(w) != 3 || w["type"] != "welcome" || w["funduqPublicKey"] != h.funduq.PublicKeyHex() {
				t.Fatalf("welcome = %v", w)
			}
			tk, nonce := hello["ticket"].(string), hello["nonce"].(string)
			if err := identity.Verify(h.funduq.PublicKey(), identity.FunduqConnectPayload(tk, nonce), w["answer"]); err != nil {
				t.Fatalf("answer does not verify under the funduq key: %v", err)
			}

			o := h.outcome()
			if o.err != nil {
				t.Fatal(o.err)
			}
			if o.res.PublicKey != h.provider.PublicKeyHex() || o.res.Ticket != tk || o.res.Nonce != nonce {
				t.Fatalf("result = %+v", o.res)
			}
			if (o.res.MaxConcurrentRuns == nil) != (tc.wantMax == nil) ||
				o.res.MaxConcurrentRuns != nil && *o.res.MaxConcurrentRuns != *tc.wantMax {
				t.Fatalf("MaxConcurrentRuns = %v, want %v", o.res.MaxConcurrentRuns, tc.wantMax)
			}
			if err := h.store.Claim(context.Background(), tk, h.provider.PublicKeyHex()); !errors.Is(err, tickets.ErrUnknownTicket) {
				t.Fatalf("ticket not spent: claim err = %v", err)
			}
		})
	}
}

// The spec's worked example (provider a5…, funduq b6…, ticket b7…, nonce c9…)
// gives the spec's answer.
func TestWorkedExample(t *testing.T) {
	h := newHarness(t, options{})
	const tk, nonce = "b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7", "c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9"
	if err := h.rdb.Set(context.Background(), h.prefix+"ticket:"+tk, h.provider.PublicKeyHex(), tickets.TTL).Err(); err != nil {
		t.Fatal(err)
	}
	c := h.dial()
	send(t, c, map[string]any{
		"type": "hello", "version": 4, "publicKey": h.provider.PublicKeyHex(), "ticket": tk, "nonce": nonce,
		"proof":             "3e1e9a69c905cdd2e050bf19d8c938f903be2475b7468b76833bfe8d72ad34897a1d163511c8a53312d8f846fd636ed424e33773d28fd6eb7feadc4b903d2907",
		"maxConcurrentRuns": 1,
	})
	w := h.readWelcome(c)
	if w["answer"] != "270bbbfd5f0bc65429b5a075fa8a238ccd9d26a3f2ee51c30429ed908dd72d738a4e7383b7a37a3a2d9aeffb40b83b70b2a923b9d1cf59cb3ec8a302ac7c4909" {
		t.Fatalf("answer = %s", w["answer"])
	}
	if o := h.outcome(); o.err != nil {
		t.Fatal(o.err)
	}
}

// After a good handshake the link is the caller's: the hello deadline no
// longer applies. (The pause can only hide a bug, never invent one.)
func TestDeadlinesClearedAfterWelcome(t *testing.T) {
	const helloTimeout = 50 * time.Millisecond
	h := newHarness(t, options{
		cfg: func(c *handshake.Config) { c.HelloTimeout = helloTimeout },
		afterAccept: func(conn *websocket.Conn) {
			mt, data, err := conn.ReadMessage()
			if err == nil {
				err = conn.WriteMessage(mt, data)
			}
			if err != nil {
				conn.WriteMessage(websocket.TextMessage, []byte("server: "+err.Error()))
			}
		},
	})
	c := h.dial()
	send(t, c, h.hello(h.provider))
	h.readWelcome(c)
	time.Sleep(4 * helloTimeout)
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"register","agents":[]}`)); err != nil {
		t.Fatal(err)
	}
	_, data, err := c.ReadMessage()
	if err != nil || string(data) != `{"type":"register","agents":[]}` {
		t.Fatalf("echo = %q, %v", data, err)
	}
	if o := h.outcome(); o.err != nil {
		t.Fatal(o.err)
	}
}

func TestRefusals(t *testing.T) {
	longVersion := strings.Repeat("9", 200)
	for _, tc := range []struct {
		name   string
		set    func(map[string]any) // edits a good hello
		raw    []byte               // sent instead, when set
		binary bool
		reason string
	}{
		{name: "not json", raw: []byte("hello?"), reason: "first frame must be hello"},
		{name: "json array", raw: []byte(`["hello"]`), reason: "first frame must be hello"},
		{name: "json null", raw: []byte(`null`), reason: "first frame must be hello"},
		{name: "binary hello", binary: true, reason: "first frame must be hello"},
		{name: "other type", set: func(m map[string]any) { m["type"] = "register" }, reason: "first frame must be hello"},
		{name: "type not a string", set: func(m map[string]any) { m["type"] = 1 }, reason: "first frame must be hello"},
		{name: "no type", set: func(m map[string]any) { delete(m, "type") }, reason: "first frame must be hello"},
		{name: "no version", set: func(m map[string]any) { delete(m, "version") },
			reason: "hello has no version: this funduq speaks wire v4, the ticket handshake (POST /tickets, then hello)"},
		{name: "null version", set: func(m map[string]any) { m["version"] = nil },
			reason: "hello has no version: this funduq speaks wire v4, the ticket handshake (POST /tickets, then hello)"},
		{name: "version 3", set: func(m map[string]any) { m["version"] = 3 }, reason: "unsupported wire version 3; this funduq speaks v4"},
		{name: "version 5", set: func(m map[string]any) { m["version"] = 5 }, reason: "unsupported wire version 5; this funduq speaks v4"},
		{name: "version string", set: func(m map[string]any) { m["version"] = "4" }, reason: `unsupported wire version "4"; this funduq speaks v4`},
		{name: "version 4.5", set: func(m map[string]any) { m["version"] = 4.5 }, reason: "unsupported wire version 4.5; this funduq speaks v4"},
		{name: "long version", raw: []byte(`{"type":"hello","version":` + longVersion + `}`),
			reason: "unsupported wire version " + longVersion[:29] + "…; this funduq speaks v4"},
		{name: "no publicKey", set: func(m map[string]any) { delete(m, "publicKey") },
			reason: "hello needs a publicKey — the provider's Ed25519 key as 64 lowercase hex chars"},
		{name: "empty publicKey", set: func(m map[string]any) { m["publicKey"] = "" },
			reason: "hello needs a publicKey — the provider's Ed25519 key as 64 lowercase hex chars"},
		{name: "publicKey not a string", set: func(m map[string]any) { m["publicKey"] = 7 },
			reason: "hello needs a publicKey — the provider's Ed25519 key as 64 lowercase hex chars"},
		{name: "no ticket", set: func(m map[string]any) { delete(m, "ticket") }, reason: "hello needs a ticket — POST /tickets issues one"},
		{name: "empty ticket", set: func(m map[string]any) { m["ticket"] = "" }, reason: "hello needs a ticket — POST /tickets issues one"},
		{name: "null nonce", set: func(m map[string]any) { m["nonce"] = nil },
			reason: "hello needs a nonce — a fresh random string of the provider's choosing"},
		{name: "nonce not a string", set: func(m map[string]any) { m["nonce"] = 12 },
			reason: "hello needs a nonce — a fresh random string of the provider's choosing"},
		{name: "no proof", set: func(m map[string]any) { delete(m, "proof") },
			reason: "hello needs a proof — the provider's signature over the connect payload"},
		{name: "short publicKey", set: func(m map[string]any) { m["publicKey"] = "abc" },
			reason: "publicKey must be 64 lowercase hex chars: got 3 chars"},
		{name: "uppercase publicKey", set: func(m map[string]any) { m["publicKey"] = "A" + m["publicKey"].(string)[1:] },
			reason: "publicKey must be 64 lowercase hex chars: char 0 is not lowercase hex"},
		{name: "zero runs", set: func(m map[string]any) { m["maxConcurrentRuns"] = 0 }, reason: "maxConcurrentRuns must be a positive integer or null"},
		{name: "negative runs", set: func(m map[string]any) { m["maxConcurrentRuns"] = -1 }, reason: "maxConcurrentRuns must be a positive integer or null"},
		{name: "fractional runs", set: func(m map[string]any) { m["maxConcurrentRuns"] = 1.5 }, reason: "maxConcurrentRuns must be a positive integer or null"},
		{name: "string runs", set: func(m map[string]any) { m["maxConcurrentRuns"] = "2" }, reason: "maxConcurrentRuns must be a positive integer or null"},
		{name: "bool runs", set: func(m map[string]any) { m["maxConcurrentRuns"] = true }, reason: "maxConcurrentRuns must be a positive integer or null"},
		{name: "huge runs", set: func(m map[string]any) { m["maxConcurrentRuns"] = json.Number("99999999999999999999") },
			reason: "maxConcurrentRuns must be a positive integer or null"},
		{name: "nonce with colon", set: func(m map[string]any) { m["nonce"] = "ab:cd" }, reason: "nonce must not contain ':'"},
		{name: "too large", raw: []byte(`{"type":"hello","pad":"` + strings.Repeat("x", handshake.MaxHelloBytes) + `"}`),
			reason: "hello frame too large"},
		// Order: the first failing check names the refusal.
		{name: "version before ticket", set: func(m map[string]any) { delete(m, "version"); delete(m, "ticket") },
			reason: "hello has no version: this funduq speaks wire v4, the ticket handshake (POST /tickets, then hello)"},
		{name: "ticket before proof", set: func(m map[string]any) { delete(m, "proof"); delete(m, "ticket") },
			reason: "hello needs a ticket — POST /tickets issues one"},
		{name: "key shape before runs", set: func(m map[string]any) { m["publicKey"] = "abc"; m["maxConcurrentRuns"] = 0 },
			reason: "publicKey must be 64 lowercase hex chars: got 3 chars"},
		{name: "runs before nonce", set: func(m map[string]any) { m["nonce"] = "a:b"; m["maxConcurrentRuns"] = 0 },
			reason: "maxConcurrentRuns must be a positive integer or null"},
		{name: "nonce before ticket", set: func(m map[string]any) { m["nonce"] = "a:b"; m["ticket"] = strings.Repeat("0", 32) },
			reason: "nonce must not contain ':'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, options{})
			c := h.dial()
			hello := h.hello(h.provider)
			issued := hello["ticket"].(string)
			switch {
			case tc.binary:
				b, _ := json.Marshal(hello)
				if err := c.WriteMessage(websocket.BinaryMessage, b); err != nil {
					t.Fatal(err)
				}
			case tc.raw != nil:
				if err := c.WriteMessage(websocket.TextMessage, tc.raw); err != nil {
					t.Fatal(err)
				}
			default:
				tc.set(hello)
				send(t, c, hello)
			}
			h.expectRefusal(c, tc.reason)
			if !h.ticketExists(issued) {
				t.Fatal("a hello refused before the claim spent its ticket")
			}
		})
	}
}

func TestRefusesWithoutHelloInTime(t *testing.T) {
	h := newHarness(t, options{cfg: func(c *handshake.Config) { c.HelloTimeout = 100 * time.Millisecond }})
	c := h.dial()
	h.expectRefusal(c, "no hello frame")
}

func TestRefusesUnknownTicket(t *testing.T) {
	h := newHarness(t, options{})
	c := h.dial()
	hello := h.hello(h.provider)
	tk, nonce := randomHex(16), hello["nonce"].(string)
	hello["ticket"] = tk
	hello["proof"] = h.provider.Sign(identity.ProviderConnectPayload(h.funduq.PublicKeyHex(), tk, nonce))
	send(t, c, hello)
	h.expectRefusal(c, "unknown or expired ticket")
}

func TestRefusesMalformedTicketAsUnknown(t *testing.T) {
	h := newHarness(t, options{})
	c := h.dial()
	hello := h.hello(h.provider)
	hello["ticket"] = "*"
	hello["proof"] = h.provider.Sign(identity.ProviderConnectPayload(h.funduq.PublicKeyHex(), "*", hello["nonce"].(string)))
	send(t, c, hello)
	h.expectRefusal(c, "unknown or expired ticket")
}

func TestRefusesExpiredTicket(t *testing.T) {
	h := newHarness(t, options{})
	c := h.dial()
	hello := h.hello(h.provider)
	// Redis drops a key whose expiry is in the past at once.
	if err := h.rdb.PExpireAt(context.Background(), h.prefix+"ticket:"+hello["ticket"].(string), time.Unix(1, 0)).Err(); err != nil {
		t.Fatal(err)
	}
	send(t, c, hello)
	h.expectRefusal(c, "unknown or expired ticket")
}

func TestRefusesSpentTicket(t *testing.T) {
	h := newHarness(t, options{})
	hello := h.hello(h.provider)
	c := h.dial()
	send(t, c, hello)
	h.readWelcome(c)
	if o := h.outcome(); o.err != nil {
		t.Fatal(o.err)
	}
	// The same hello again: the ticket is single use.
	c2 := h.dial()
	send(t, c2, hello)
	h.expectRefusal(c2, "unknown or expired ticket")
}

// A ticket presented by another key is refused as an unknown one (the
// stranger learns nothing of it) and left for its owner — even when the
// stranger's proof is itself good.
func TestForeignTicketIsNotSpent(t *testing.T) {
	h := newHarness(t, options{})
	owner, stranger := h.provider, signerOf(t, "c3")
	tk := h.issue(owner.PublicKeyHex())
	nonce := randomHex(16)
	c := h.dial()
	send(t, c, map[string]any{
		"type": "hello", "version": 4, "publicKey": stranger.PublicKeyHex(), "ticket": tk, "nonce": nonce,
		"proof": stranger.Sign(identity.ProviderConnectPayload(h.funduq.PublicKeyHex(), tk, nonce)),
	})
	h.expectRefusal(c, "unknown or expired ticket")
	if err := h.store.Claim(context.Background(), tk, owner.PublicKeyHex()); err != nil {
		t.Fatalf("owner's claim after a foreign attempt: %v", err)
	}
}

// The proof is checked before the ticket is claimed (unlike the reference):
// a hello naming the ticket's own key with a bad proof — a stranger's
// signature, or a proof over another challenge — leaves the ticket for its
// owner (design.md D11).
func TestBadProofLeavesTicket(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proof func(h *harness, tk, nonce string) string
	}{
		{"proof for another funduq", func(h *harness, tk, nonce string) string {
			return h.provider.Sign(identity.ProviderConnectPayload(h.provider.PublicKeyHex(), tk, nonce))
		}},
		{"proof over another nonce", func(h *harness, tk, _ string) string {
			return h.provider.Sign(identity.ProviderConnectPayload(h.funduq.PublicKeyHex(), tk, "other"))
		}},
		{"proof by another key", func(h *harness, tk, nonce string) string {
			return signerOf(h.t, "c3").Sign(identity.ProviderConnectPayload(h.funduq.PublicKeyHex(), tk, nonce))
		}},
		{"reflected answer", func(h *harness, tk, nonce string) string {
			return h.funduq.Sign(identity.FunduqConnectPayload(tk, nonce))
		}},
		{"not hex", func(*harness, string, string) string { return "zz" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, options{})
			c := h.dial()
			hello := h.hello(h.provider)
			tk := hello["ticket"].(string)
			hello["proof"] = tc.proof(h, tk, hello["nonce"].(string))
			send(t, c, hello)
			h.expectRefusal(c, "bad proof")
			if err := h.store.Claim(context.Background(), tk, h.provider.PublicKeyHex()); err != nil {
				t.Fatalf("the owner's claim after a bad proof: %v", err)
			}
		})
	}
}

func TestPeerLeavesBeforeHello(t *testing.T) {
	t.Run("drops the connection", func(t *testing.T) {
		h := newHarness(t, options{})
		c := h.dial()
		c.Close()
		o := h.outcome()
		if o.err == nil || errors.Is(o.err, handshake.ErrRefused) {
			t.Fatalf("err = %v, want a non-refusal error", o.err)
		}
	})
	t.Run("sends a close", func(t *testing.T) {
		h := newHarness(t, options{})
		c := h.dial()
		if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")); err != nil {
			t.Fatal(err)
		}
		o := h.outcome()
		var ce *websocket.CloseError
		if !errors.As(o.err, &ce) || ce.Code != websocket.CloseNormalClosure || errors.Is(o.err, handshake.ErrRefused) {
			t.Fatalf("err = %v, want the peer's close", o.err)
		}
	})
}

func TestStoreDownIsNotARefusal(t *testing.T) {
	rdb, _ := redistest.Client(t)
	dead := redis.NewClient(rdb.Options())
	dead.Close()
	h := newHarness(t, options{cfg: func(c *handshake.Config) { c.Tickets = tickets.New(dead, "x:") }})
	c := h.dial()
	send(t, c, h.hello(h.provider))
	h.expectClose(c, websocket.CloseTryAgainLater, "ticket store unavailable; try again shortly")
	o := h.outcome()
	if o.err == nil || errors.Is(o.err, handshake.ErrRefused) || strings.Contains(o.err.Error(), "ticket store unavailable") {
		t.Fatalf("err = %v, want the store's error", o.err)
	}
}

func TestContextEndsWhileWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHarness(t, options{ctx: ctx})
	c := h.dial()
	cancel()
	h.expectClose(c, websocket.CloseGoingAway, "funduq is going away")
	if o := h.outcome(); !errors.Is(o.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", o.err)
	}
}

func TestRefusedErrorMatching(t *testing.T) {
	err := error(&handshake.RefusedError{Reason: "bad proof"})
	if !errors.Is(err, handshake.ErrRefused) || err.Error() != "handshake: refused: bad proof" {
		t.Fatalf("err = %v", err)
	}
	if errors.Is(errors.New("x"), handshake.ErrRefused) {
		t.Fatal("unrelated error matches ErrRefused")
	}
}
