package node_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// The front door seen by a stranger on the raw wire (design.md D11, §The
// provider wire): a client of its own over gorilla/websocket, not the SDK
// and not nodetest.Connect, so that it can send what they never would.

// doorKey is a provider key the tests hold.
func doorKey(t *testing.T, seed byte) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// postTicket asks h for a ticket for key and returns the status and, on
// 201, the ticket.
func postTicket(t *testing.T, h *nodetest.Harness, key string) (int, string) {
	t.Helper()
	resp, err := http.Post(h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tr wire.TicketResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	return resp.StatusCode, tr.Ticket
}

// ticketFor is postTicket that must succeed.
func ticketFor(t *testing.T, h *nodetest.Harness, key string) string {
	t.Helper()
	code, tk := postTicket(t, h, key)
	if code != http.StatusCreated || tk == "" {
		t.Fatalf("POST /tickets for %s…: %d", key[:8], code)
	}
	return tk
}

// rawHello is a hello naming key and ticket, its proof signed by signer
// over nonce (signer need not hold key: a stranger's attempt).
func rawHello(h *nodetest.Harness, key, ticket, nonce string, signer *identity.Signer) map[string]any {
	return map[string]any{
		"type": "hello", "version": 4, "publicKey": key, "ticket": ticket, "nonce": nonce,
		"proof": signer.Sign(identity.ProviderConnectPayload(h.Node.FunduqKey(), ticket, nonce)),
	}
}

// helloAnswer dials /ws/provider, sends hello and returns the first thing
// the node answers: the welcome frame's type, or the close it sent.
func helloAnswer(t *testing.T, h *nodetest.Harness, hello map[string]any) (string, *websocket.CloseError) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	defer ws.Close()
	if err := ws.WriteJSON(hello); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, data, err := ws.ReadMessage()
	if err != nil {
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("hello answered with %v, not a close frame", err)
		}
		return "", ce
	}
	typ, _ := wire.PeekType(data)
	return typ, nil
}

// expectWelcome fails t unless hello is welcomed.
func expectWelcome(t *testing.T, h *nodetest.Harness, hello map[string]any, what string) {
	t.Helper()
	if typ, ce := helloAnswer(t, h, hello); typ != wire.TypeWelcome {
		t.Fatalf("%s: answered %q, close %v; want a welcome", what, typ, ce)
	}
}

// expectClosed fails t unless hello is refused with code and reason.
func expectClosed(t *testing.T, h *nodetest.Harness, hello map[string]any, code int, reason, what string) {
	t.Helper()
	typ, ce := helloAnswer(t, h, hello)
	if ce == nil || ce.Code != code || ce.Text != reason {
		t.Fatalf("%s: answered %q, close %v; want %d %q", what, typ, ce, code, reason)
	}
}

func nonceOf(s string) string { return fmt.Sprintf("%032x", s) }

// A stranger who saw another key's ticket cannot spend it: not by naming
// the owner's key with a proof of its own (key B's signature on key A's
// ticket), nor with the owner's own proof lifted from an earlier hello (a
// signature over another challenge). The owner's hello with the ticket is
// then welcomed (design.md D11: "a stranger who saw a ticket cannot burn
// it").
func TestStrangerCannotBurnAnotherKeysTicket(t *testing.T) {
	h := nodetest.Start(t, nil)
	owner, stranger := doorKey(t, 0xe1), doorKey(t, 0xe2)
	earlier := rawHello(h, owner.PublicKeyHex(), ticketFor(t, h, owner.PublicKeyHex()), nonceOf("o0"), owner)
	expectWelcome(t, h, earlier, "the owner's earlier hello")
	tk := ticketFor(t, h, owner.PublicKeyHex())

	expectClosed(t, h, rawHello(h, owner.PublicKeyHex(), tk, nonceOf("s1"), stranger),
		websocket.ClosePolicyViolation, "bad proof", "the owner's key, the stranger's signature")
	lifted := rawHello(h, owner.PublicKeyHex(), tk, earlier["nonce"].(string), owner)
	lifted["proof"] = earlier["proof"]
	expectClosed(t, h, lifted, websocket.ClosePolicyViolation, "bad proof", "the owner's proof from an earlier hello")

	expectWelcome(t, h, rawHello(h, owner.PublicKeyHex(), tk, nonceOf("o1"), owner), "the owner after the stranger")
}

// A stranger replaying another key's ticket under its own key, with a
// proof that is good for its key, learns no more than "unknown": the close
// it gets is the one a ticket never issued gets, so a ticket it saw tells
// it nothing about whether its owner has connected yet. The ticket is left
// for its owner.
func TestForeignTicketIsAnsweredAsUnknown(t *testing.T) {
	h := nodetest.Start(t, nil)
	owner, stranger := doorKey(t, 0xe1), doorKey(t, 0xe2)
	never := strings.Repeat("0", 32)
	typ, unknown := helloAnswer(t, h, rawHello(h, stranger.PublicKeyHex(), never, nonceOf("s0"), stranger))
	if unknown == nil || unknown.Code != websocket.ClosePolicyViolation {
		t.Fatalf("a ticket never issued: answered %q, close %v", typ, unknown)
	}
	tk := ticketFor(t, h, owner.PublicKeyHex())
	expectClosed(t, h, rawHello(h, stranger.PublicKeyHex(), tk, nonceOf("s1"), stranger),
		unknown.Code, unknown.Text, "another key's ticket")
	expectWelcome(t, h, rawHello(h, owner.PublicKeyHex(), tk, nonceOf("o1"), owner), "the owner after the stranger")
}

// POST /tickets is unauthenticated, so a stranger may ask for tickets in
// any key's name; doing so must not use up that key's allowance
// (FUNDUQ_TICKETS_PER_MINUTE): an honest provider reconnecting meanwhile
// gets its ticket and its link. The allowance still holds for the key's
// own links: past it, the next request is 429 with Retry-After.
func TestStrangerCannotUseUpAnotherKeysTickets(t *testing.T) {
	const perMinute = 3
	h := nodetest.Start(t, func(c *config.Broker) { c.TicketsPerMinute = perMinute })
	owner := doorKey(t, 0xe1)
	for range 2 * perMinute {
		postTicket(t, h, owner.PublicKeyHex()) // the stranger, in the owner's name
	}
	for i := range perMinute {
		tk := ticketFor(t, h, owner.PublicKeyHex())
		expectWelcome(t, h, rawHello(h, owner.PublicKeyHex(), tk, nonceOf(fmt.Sprint("o", i)), owner), "the owner after the stranger's requests")
	}
	resp, err := http.Post(h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+owner.PublicKeyHex()+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the owner past its allowance: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// A connection that asked one thing and then says nothing is let go, as a
// new connection that says nothing is (ReadHeaderTimeout): otherwise a
// stranger holds a socket and a goroutine of the broker node for every
// keep-alive connection it leaves idle, for ever, and the node runs out of
// them before an honest provider can connect.
func TestIdleConnectionIsLetGo(t *testing.T) {
	h := nodetest.Start(t, nil)
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /livez HTTP/1.1\r\nHost: funduq\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("GET /livez: %d, close %v", resp.StatusCode, resp.Close)
	}
	// Guard: well past the idle bound (the header timeout, 10 s).
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection: read %d, %v; want it closed by the node", n, err)
	}
}

// An agent's agentCardExtra and metadata are JSON objects (the reference's
// Registration: an object each, default {}). Anything else was taken and
// then dropped — the A2A card reads skills and the rest only from an
// object — so the provider was told "registered" about a card it does not
// have. It is refused naming the field, and nothing is registered.
func TestRegisterRefusesAgentDocumentsThatAreNotObjects(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe2, nil)
	for _, tc := range []struct{ agent, field string }{
		{`{"name":"a","agentCardExtra":[{"skills":[]}]}`, "agentCardExtra"},
		{`{"name":"a","agentCardExtra":"skills"}`, "agentCardExtra"},
		{`{"name":"a","metadata":5}`, "metadata"},
		{`{"name":"a","metadata":true}`, "metadata"},
	} {
		p.SendRaw(`{"type":"register","agents":[` + tc.agent + `]}`)
		var e wire.Error
		p.Expect(wire.TypeError, &e)
		if !strings.Contains(e.Message, "agents[0]") || !strings.Contains(e.Message, tc.field+" must be a JSON object") {
			t.Fatalf("%s: %+v", tc.agent, e)
		}
	}
	if l := listing(t, h); len(l) != 0 {
		t.Fatalf("registered: %+v", l)
	}
	// null is the field's absence, as for every optional field.
	p.SendRaw(`{"type":"register","agents":[{"name":"a","agentCardExtra":null,"metadata":null}]}`)
	p.Expect(wire.TypeRegistered, nil)
}

// A key of small order (the neutral point, the point of order two, …) is
// no one's: Ed25519 as Go verifies it accepts one signature under it for
// every message, so anyone could open a link as that key — and take over,
// replace or delete the agents another stranger serves under it, or sign
// its view proofs. The handshake refuses such a key's proof.
func TestSmallOrderKeyCannotHandshake(t *testing.T) {
	h := nodetest.Start(t, nil)
	// R = the neutral point, S = 0: [S]B = R + [k]A for every k when A
	// is the neutral point.
	const universal = "01" + "000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
	for _, key := range []string{
		"0100000000000000000000000000000000000000000000000000000000000000", // the neutral point
		"eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // the same, y = p+1
	} {
		tk := ticketFor(t, h, key)
		hello := map[string]any{"type": "hello", "version": 4, "publicKey": key, "ticket": tk, "nonce": nonceOf(key), "proof": universal}
		expectClosed(t, h, hello, websocket.ClosePolicyViolation, "bad proof", "a hello as "+key[:8]+"…")
	}
}

// A request to a link's path that cannot be upgraded is refused in the one
// error body every HTTP refusal of funduq's has (core/apierr, design.md
// §The provider wire), saying what is wrong — not gorilla's bare
// "Bad Request" or the mux's plain-text 405.
func TestLinkUpgradeRefusalsAreTheErrorBody(t *testing.T) {
	h := nodetest.Start(t, nil)
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		status       int
		code         string
	}{
		{"GET", "/ws/provider", nil, http.StatusBadRequest, "bad_request"},
		{"GET", "/ws/kyok", nil, http.StatusBadRequest, "bad_request"},
		{"GET", "/ws/provider", map[string]string{"Sec-WebSocket-Version": "12"}, http.StatusBadRequest, "bad_request"},
		{"POST", "/ws/provider", nil, http.StatusMethodNotAllowed, "method_not_allowed"},
		{"POST", "/ws/kyok", nil, http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		req, _ := http.NewRequest(tc.method, h.URL+tc.path, nil)
		if tc.hdr != nil {
			for k, v := range upgrade {
				req.Header.Set(k, v)
			}
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		derr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || derr != nil || body.Error.Code != tc.code || body.Error.Message == "" ||
			body.Error.Message == http.StatusText(tc.status) {
			t.Errorf("%s %s %v: %d %q, %+v (%v)", tc.method, tc.path, tc.hdr, resp.StatusCode, resp.Header.Get("Content-Type"), body, derr)
		}
	}
}
