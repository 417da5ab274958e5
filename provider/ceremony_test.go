package provider

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

func echoAgent(g *gates) Agent {
	return Agent{
		Name:           "echo",
		Description:    "says it back",
		AgentCardExtra: json.RawMessage(`{"skills":[{"id":"echo"}]}`),
		Metadata:       json.RawMessage(`{"team":"tests"}`),
		Handler:        g.handler,
	}
}

func waitReady(t *testing.T, c *Client) {
	t.Helper()
	select {
	case <-c.Ready():
	case <-time.After(guard):
		t.Fatal("client never became ready")
	}
}

func TestCeremonyRegisters(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	cfg := baseConfig(t, f, echoAgent(g))
	cfg.MaxConcurrentRuns = intp(3)
	c, _ := startClient(t, cfg)

	p := f.registeredPeer(t)
	h := p.hello
	if h.PublicKey != cfg.Signer.PublicKeyHex() {
		t.Errorf("hello publicKey %q", h.PublicKey)
	}
	if h.MaxConcurrentRuns == nil || *h.MaxConcurrentRuns != 3 {
		t.Errorf("hello maxConcurrentRuns %v, want 3", h.MaxConcurrentRuns)
	}
	if len(h.Nonce) != 32 {
		t.Errorf("hello nonce %q is not 32 hex chars", h.Nonce)
	}
	reg := p.register
	if reg.ProviderName != "test provider" || len(reg.Agents) != 1 {
		t.Fatalf("register %+v", reg)
	}
	a := reg.Agents[0]
	if a.Name != "echo" || a.Description != "says it back" || a.TakesInterjections ||
		string(a.AgentCardExtra) != `{"skills":[{"id":"echo"}]}` || string(a.Metadata) != `{"team":"tests"}` {
		t.Errorf("registration %+v", a)
	}
	waitReady(t, c)
	// Connected is set before the writer starts, so after a frame from the
	// client it must read true: use a query to get one.
	go func() { _, _ = c.Query(t.Context(), "t-1", 0) }()
	q := p.expect(t, wire.TypeQuery)
	if !c.Connected() {
		t.Error("Connected() is false on a registered link")
	}
	p.send(t, wire.QueryResult{Type: wire.TypeQueryResult, QueryID: q["queryId"].(string), Result: json.RawMessage(`[]`)})
}

func TestRegisterFrameIsExact(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	startClient(t, baseConfig(t, f, Agent{Name: "plain", Handler: g.handler}))
	p := f.registeredPeer(t)
	// Registration is strict on funduq's side (unknown keys are refused):
	// the frame carries exactly the contract's keys.
	const want = `{"type":"register","agents":[{"name":"plain","description":"","takesInterjections":false}],"providerName":"test provider"}`
	if string(p.regRaw) != want {
		t.Errorf("register frame\n got %s\nwant %s", p.regRaw, want)
	}
	if p.hello.MaxConcurrentRuns != nil {
		t.Errorf("unlimited client declared maxConcurrentRuns %d", *p.hello.MaxConcurrentRuns)
	}
}

func TestNoPinTrustsTheTicketKey(t *testing.T) {
	f := newFakeFunduq(t)
	cfg := baseConfig(t, f, echoAgent(newGates()))
	cfg.FunduqKey = ""
	c, _ := startClient(t, cfg)
	f.registeredPeer(t)
	waitReady(t, c)
}

func TestPinMismatchRefusesBeforeSigning(t *testing.T) {
	f := newFakeFunduq(t)
	cfg := baseConfig(t, f, echoAgent(newGates()))
	cfg.FunduqKey = mustSigner(t, strangerSeedHex).PublicKeyHex()
	c, stop := startClient(t, cfg)

	// Three tickets means at least two complete attempts: had either signed
	// and dialled, the dial would have reached funduq before the next ticket.
	for n := 0; n < 3; {
		n = f.waitTicket(t)
	}
	stop()
	if got := f.conns(); got != 0 {
		t.Fatalf("client dialled %d times despite a pin mismatch", got)
	}
	select {
	case <-c.Ready():
		t.Fatal("client became ready with a mismatched pin")
	default:
	}
	if c.Connected() {
		t.Fatal("Connected() with a mismatched pin")
	}
}

func TestPinMismatchErrorNamesThePin(t *testing.T) {
	f := newFakeFunduq(t)
	cfg := baseConfig(t, f, echoAgent(newGates()))
	cfg.FunduqKey = mustSigner(t, strangerSeedHex).PublicKeyHex()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.fetchTicket(t.Context(), c.base)
	if !errors.Is(err, ErrPinMismatch) {
		t.Fatalf("fetchTicket: %v, want ErrPinMismatch", err)
	}
	c.ownTransport.CloseIdleConnections()
}

func TestBadWelcomeIsRefused(t *testing.T) {
	f := newFakeFunduq(t)
	stranger := mustSigner(t, strangerSeedHex)
	f.setHooks(func(f *fakeFunduq) {
		f.welcome = func(n int, w *wire.Welcome) {
			switch n {
			case 1: // an answer over the wrong payload
				w.Answer = f.signer.Sign(identity.FunduqConnectPayload("not-the-ticket", "not-the-nonce"))
			case 2: // a welcome naming another key, answer signed by it
				w.FunduqPublicKey = stranger.PublicKeyHex()
				w.Answer = stranger.Sign([]byte("whatever"))
			case 3: // not a welcome at all
				w.Type = wire.TypeRegistered
			}
		}
	})
	c, _ := startClient(t, baseConfig(t, f, echoAgent(newGates())))

	// The client's next link can finish its ceremony before the fake has
	// handed over the one the client closed: take the four links in
	// whatever order they come, and look at each by its number.
	links := map[int]*peer{}
	for len(links) < 4 {
		p := f.nextPeer(t)
		links[p.n] = p
	}
	for i := 1; i <= 3; i++ {
		p := links[i]
		if p == nil {
			t.Fatalf("links %v: no link %d", slices.Collect(maps.Keys(links)), i)
		}
		if p.register != nil {
			t.Fatalf("peer %d: client registered after a bad welcome", p.n)
		}
		var ce *websocket.CloseError
		if !errors.As(p.err, &ce) || ce.Code != websocket.ClosePolicyViolation {
			t.Errorf("peer %d: client ended the handshake with %v, want a 1008 close", p.n, p.err)
		}
		if rest := p.closed(t); len(rest) != 0 {
			t.Fatalf("peer %d: client sent %d frames after a bad welcome", p.n, len(rest))
		}
	}
	if p := links[4]; p == nil || p.err != nil || p.register == nil {
		t.Fatalf("link 4 did not complete its ceremony: %+v", p)
	}
	waitReady(t, c)
}

func TestRegisteredMustFollowRegister(t *testing.T) {
	f := newFakeFunduq(t)
	f.setHooks(func(f *fakeFunduq) {
		f.afterRegister = func(n int, p *peer) bool {
			switch n {
			case 1:
				_ = p.write(wire.Error{Type: wire.TypeError, Message: "register: name is taken"})
			case 2:
				_ = p.write(runFrame("r-early", "echo", "t-1", "too soon"))
			default:
				return false
			}
			return true
		}
	})
	g := newGates()
	c, _ := startClient(t, baseConfig(t, f, echoAgent(g)))

	for i := 1; i <= 2; i++ {
		p := f.nextPeer(t)
		if p.register == nil {
			t.Fatalf("peer %d: no register: %v", p.n, p.err)
		}
		if rest := p.closed(t); len(rest) != 0 {
			t.Fatalf("peer %d: client answered %s without being registered", p.n, rest[0])
		}
	}
	select {
	case <-c.Ready():
		t.Fatal("client ready before any registered")
	default:
	}
	p := f.registeredPeer(t)
	waitReady(t, c)
	// The early run was never accepted: the first run on the good link is
	// the first handler to start.
	p.send(t, runFrame("r-1", "echo", "t-1", "hi"))
	p.expectAck(t, "r-1")
	if r := g.waitStarted(t); r.ID != "r-1" {
		t.Fatalf("handler started for %s", r.ID)
	}
	g.release("r-1")
	p.expectFinish(t, "r-1")
}

func TestStandbyTicketAnswerNamesTheLeader(t *testing.T) {
	leader := newFakeFunduq(t)
	standby := newFakeFunduq(t)
	standby.setHooks(func(f *fakeFunduq) {
		f.onTicket = func(n int, w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "not the leader", "leader": leader.url()})
			return true
		}
	})
	cfg := baseConfig(t, standby, echoAgent(newGates()))
	c, _ := startClient(t, cfg)
	leader.registeredPeer(t)
	waitReady(t, c)
	if standby.conns() != 0 {
		t.Fatal("client dialled the standby")
	}
}

// A standby naming the leader is followed at once, not after the
// reconnect backoff: the SDK held runs through the failover that made that
// node a standby, and the new leader waits for them only
// FUNDUQ_PROVIDER_GRACE (30 s, the backoff's own cap). Found running two
// nodes by hand with no load balancer: the SDK waited 10 s before
// dialling the leader the standby named.
func TestStandbyNamingTheLeaderIsFollowedAtOnce(t *testing.T) {
	leader := newFakeFunduq(t)
	standby := newFakeFunduq(t)
	standby.setHooks(func(f *fakeFunduq) {
		f.onTicket = func(n int, w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "not the leader", "leader": leader.url()})
			return true
		}
	})
	cfg := baseConfig(t, standby, echoAgent(newGates()))
	// A backoff no test outlasts: only a redirect taken without it
	// reaches the leader.
	cfg.Backoff = Backoff{Min: time.Hour, Max: time.Hour}
	c, _ := startClient(t, cfg)
	leader.registeredPeer(t)
	waitReady(t, c)
}

func TestStandbyUpgradeAnswerNamesTheLeader(t *testing.T) {
	leader := newFakeFunduq(t)
	standby := newFakeFunduq(t)
	// Tickets live in shared storage in the split deployment: make the
	// standby's tickets valid at the leader.
	standby.setHooks(func(f *fakeFunduq) {
		f.onTicket = func(n int, w http.ResponseWriter, r *http.Request) bool {
			var req wire.TicketRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			ticket := randomHex(16)
			leader.mu.Lock()
			leader.tickets[ticket] = req.PublicKey
			leader.mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(wire.TicketResponse{Ticket: ticket, FunduqPublicKey: f.key()})
			return true
		}
		f.onUpgrade = func(w http.ResponseWriter, r *http.Request) bool {
			u, _ := url.Parse(leader.url())
			u.Scheme = "ws"
			u.Path = "/ws/provider"
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"leader": u.String()})
			return true
		}
	})
	c, _ := startClient(t, baseConfig(t, standby, echoAgent(newGates())))
	leader.registeredPeer(t)
	waitReady(t, c)
}

func TestURLDerivation(t *testing.T) {
	for _, tc := range []struct{ base, ws, tickets string }{
		{"http://127.0.0.1:8700", "ws://127.0.0.1:8700/ws/provider", "http://127.0.0.1:8700/tickets"},
		{"https://funduq.example/", "wss://funduq.example/ws/provider", "https://funduq.example/tickets"},
		{"https://edge.example/funduq/", "wss://edge.example/funduq/ws/provider", "https://edge.example/funduq/tickets"},
		{"http://h:1/a/b?x=1#f", "ws://h:1/a/b/ws/provider", "http://h:1/a/b/tickets"},
	} {
		u, err := parseBaseURL(tc.base)
		if err != nil {
			t.Fatalf("%s: %v", tc.base, err)
		}
		if got := wsURL(u).String(); got != tc.ws {
			t.Errorf("wsURL(%s) = %s, want %s", tc.base, got, tc.ws)
		}
		if got := endpoint(u, "/tickets").String(); got != tc.tickets {
			t.Errorf("tickets(%s) = %s, want %s", tc.base, got, tc.tickets)
		}
	}
	for _, bad := range []string{"", "ws://h/", "h:80", "http:///x"} {
		if _, err := parseBaseURL(bad); err == nil {
			t.Errorf("parseBaseURL(%q) accepted", bad)
		}
	}
}

func TestLeaderFromBody(t *testing.T) {
	for body, want := range map[string]string{
		`{"leader":"https://node-b:8700"}`:                      "https://node-b:8700",
		`{"error":"standby","leaderUrl":"wss://b/ws/provider"}`: "https://b",
		`{"leader":{"url":"http://b:1/p"}}`:                     "http://b:1/p",
		`{"leader":""}`:                                         "",
		`{"leader":"ftp://b"}`:                                  "",
		`not json`:                                              "",
	} {
		got := ""
		if u := leaderFromBody([]byte(body)); u != nil {
			got = u.String()
		}
		if got != want {
			t.Errorf("leaderFromBody(%s) = %q, want %q", body, got, want)
		}
	}
}
