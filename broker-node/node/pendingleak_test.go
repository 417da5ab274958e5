package node_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/apierr"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// pendingNow reads funduq_links_pending off /metrics.
func pendingNow(t *testing.T, h *nodetest.Harness) string {
	t.Helper()
	for _, line := range strings.Split(metrics(t, h), "\n") {
		if strings.HasPrefix(line, "funduq_links_pending ") {
			return line
		}
	}
	return ""
}

// backToZero waits until no link is counted pending, then proves the place
// is free the way a provider sees it: an upgrade is admitted.
func backToZero(t *testing.T, h *nodetest.Harness, what string) {
	t.Helper()
	h.Eventually(what+": funduq_links_pending back to 0", func() bool { return pendingNow(t, h) == "funduq_links_pending 0" })
	ws, resp, err := websocket.DefaultDialer.Dial(linkURL(h), nil)
	if err != nil {
		t.Fatalf("%s: an upgrade after it was refused: %v", what, err)
	}
	resp.Body.Close()
	_ = ws.Close()
	h.Eventually(what+": the probe's place given back", func() bool { return pendingNow(t, h) == "funduq_links_pending 0" })
}

// Every way a link fails to register gives its pending place back: a bad
// proof, another key's ticket, a plain GET, an upgrade cut off before its
// answer is read, a hello never sent, a register refused and the deadline,
// on both endpoints. With a bound of one, a single leak would refuse every
// provider after it.
func TestPendingPlaceIsGivenBackOnEveryFailure(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 1 })
	a, b := doorKey(t, 0xe1), doorKey(t, 0xe2)

	// A proof signed by another key.
	expectClosedAny(t, h, rawHello(h, a.PublicKeyHex(), ticketFor(t, h, a.PublicKeyHex()), nonceOf("bad proof"), b), "bad proof")
	backToZero(t, h, "bad proof")
	// Another key's ticket.
	expectClosedAny(t, h, rawHello(h, a.PublicKeyHex(), ticketFor(t, h, b.PublicKeyHex()), nonceOf("their ticket"), a), "another key's ticket")
	backToZero(t, h, "another key's ticket")
	// A GET that is no upgrade.
	resp, err := http.Get(h.URL + "/ws/provider")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Fatalf("a plain GET of /ws/provider answered %d", resp.StatusCode)
	}
	backToZero(t, h, "a plain GET")
	// An upgrade whose client goes away before reading the answer.
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /ws/provider HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	_ = conn.Close()
	backToZero(t, h, "an upgrade cut off")
	// An upgrade whose client reads the 101 and then leaves without hello.
	conn, err = net.Dial("tcp", strings.TrimPrefix(h.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /ws/provider HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(line, "101") {
		t.Fatalf("the raw upgrade answered %q, %v", line, err)
	}
	_ = conn.Close()
	backToZero(t, h, "upgraded, then gone without hello")
	// A hello never sent: the handshake's wait for it ends the link.
	ws, resp, err := websocket.DefaultDialer.Dial(linkURL(h), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_ = ws.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	if _, _, err := ws.ReadMessage(); err == nil {
		t.Fatal("a link that sent no hello was sent a frame")
	}
	_ = ws.Close()
	backToZero(t, h, "no hello")
	// A register refused, then the register deadline.
	s := admit(t, h, 0xe3)
	if typ, _ := s.answered([]byte(`{"type":"register","agents":[]}`)); typ != wire.TypeError {
		t.Fatalf("an empty register answered %q", typ)
	}
	upgradeRefusedFull(t, h, "a link whose register was refused is still pending")
	h.Advance(30 * time.Second)
	if ce := s.closed(); ce.Code != websocket.ClosePolicyViolation {
		t.Fatalf("register deadline: closed %v", ce)
	}
	backToZero(t, h, "register refused, deadline")
	// A KYOK link's bad proof.
	kws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/kyok", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_ = kws.WriteJSON(rawHello(h, a.PublicKeyHex(), ticketFor(t, h, a.PublicKeyHex()), nonceOf("kyok bad proof"), b))
	_ = kws.SetReadDeadline(time.Now().Add(time.Minute)) // a hang guard
	for {
		if _, _, err := kws.ReadMessage(); err != nil {
			break
		}
	}
	_ = kws.Close()
	backToZero(t, h, "KYOK bad proof")
}

// expectClosedAny fails t unless hello is answered with a close.
func expectClosedAny(t *testing.T, h *nodetest.Harness, hello map[string]any, what string) {
	t.Helper()
	if typ, ce := helloAnswer(t, h, hello); ce == nil {
		t.Fatalf("%s: answered %q; want a close", what, typ)
	}
}

// A link that registered and then deleted every agent it served holds
// nothing, as one that never registered does: it is pending again, counted
// against FUNDUQ_MAX_PENDING_LINKS and closed at a register deadline started
// anew, unless a register takes it out of pending first. Before, a stranger
// registered one name, deleted it, and held the link for as long as it
// answered pings, one per ticket, past the bound.
func TestLinkThatDeletedEveryAgentIsPendingAgain(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 1 })
	s := admit(t, h, 0xe4)
	if typ, e := s.answered(named("gone", 1)); typ != wire.TypeRegistered {
		t.Fatalf("register: %q %q", typ, e.Message)
	}
	if typ, e := s.answered([]byte(`{"type":"deleteAgent","name":"gone0"}`)); typ != wire.TypeDeleted {
		t.Fatalf("deleteAgent: %q %q", typ, e.Message)
	}
	upgradeRefusedFull(t, h, "a second link while one that serves nothing is open")

	// A register takes it out of pending again; the time it had is spent.
	h.Advance(20 * time.Second)
	if typ, e := s.answered(named("back", 1)); typ != wire.TypeRegistered {
		t.Fatalf("register again: %q %q", typ, e.Message)
	}
	backToZero(t, h, "registered again")
	h.Advance(20 * time.Second)
	s.open() // the first deadline, met, closed nothing

	// Deleted again: pending again, and closed at a full deadline from then.
	if typ, e := s.answered([]byte(`{"type":"deleteAgent","name":"back0"}`)); typ != wire.TypeDeleted {
		t.Fatalf("deleteAgent again: %q %q", typ, e.Message)
	}
	upgradeRefusedFull(t, h, "deleted again")
	h.Advance(29 * time.Second)
	s.open() // not yet
	h.Advance(time.Second)
	if ce := s.closed(); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "no register within 30s") {
		t.Fatalf("a link serving nothing at its deadline: closed %v", ce)
	}
	backToZero(t, h, "closed at its deadline")
}

// The same on /ws/kyok: a link that registered a model and deleted it is
// pending again and closed at the register deadline.
func TestKyokLinkThatDeletedEveryModelIsPendingAgain(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 1 })
	k := doorKey(t, 0xe5)
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/kyok", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Cleanup(func() { _ = ws.Close() })
	if err := ws.WriteJSON(rawHello(h, k.PublicKeyHex(), ticketFor(t, h, k.PublicKeyHex()), nonceOf("kyok pending again"), k)); err != nil {
		t.Fatal(err)
	}
	s := &stranger{t: t, ws: ws, pub: k.PublicKeyHex()}
	if typ, _ := s.next(); typ != wire.TypeWelcome {
		t.Fatalf("hello answered %q", typ)
	}
	if typ, e := s.answered([]byte(`{"type":"register","models":["m"]}`)); typ != wire.TypeRegistered {
		t.Fatalf("register: %q %q", typ, e.Message)
	}
	backToZero(t, h, "a KYOK link registered")
	if typ, e := s.answered([]byte(`{"type":"deleteModel","name":"m"}`)); typ != wire.TypeDeleted {
		t.Fatalf("deleteModel: %q %q", typ, e.Message)
	}
	upgradeRefusedFull(t, h, "a second link while a KYOK link that serves nothing is open")
	h.Advance(30 * time.Second)
	if ce := s.closed(); ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "no register within 30s") {
		t.Fatalf("a KYOK link serving nothing at its deadline: closed %v", ce)
	}
	backToZero(t, h, "KYOK link closed at its deadline")
}

// A link that serves nothing but still holds a run is not pending while it
// does, as a provider shutting down takes its agents out of service before
// it drains: it is pending from the run's end, and closed at a deadline
// from then.
func TestLinkServingNothingIsPendingOnceItsRunEnds(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 1 })
	p := h.Connect(0xe8, nil)
	p.Register("busy")
	id, thread := h.Door(p.Key, "busy", "", "hi")
	if o := p.Offer(); o.RunID != id {
		t.Fatalf("offer %s, want %s", o.RunID, id)
	}
	p.Accept(id)
	// The run keeps its agent's record, so the delete is refused, and
	// the name is out of service all the same.
	p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: "busy"})
	var e wire.Error
	p.Expect(wire.TypeError, &e)
	if e.Name != "busy" {
		t.Fatalf("deleteAgent answered %+v", e)
	}
	h.Advance(30 * time.Second)
	p.ReadBarrier()
	backToZero(t, h, "a link holding a run")

	p.Complete(id, thread)
	h.WaitStatus(id, run.Completed)
	h.Eventually("the link that serves nothing and holds no run counted pending", func() bool {
		return pendingNow(t, h) == "funduq_links_pending 1"
	})
	upgradeRefusedFull(t, h, "once its run ended")
	h.Advance(30 * time.Second)
	h.Eventually("closed at its deadline", func() bool { c, _ := p.Closed(); return c })
	wantDeadlineClose(t, p)
	backToZero(t, h, "closed at its deadline after its run")
}

// A link of a key that registers the names another link of the key serves
// replaces it (D5): neither is counted once registered, and the replaced
// one, left open, is not pending — not even after a deleteAgent, which
// leaves a link serving nothing pending again — and its close leaves the
// count at 0. A standby refuses an upgrade as not
// the leader, whatever the leader's bound holds, and counts nothing.
func TestPendingCountThroughAReplacementAndOnAStandby(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 1 })
	k := doorKey(t, 0xe6)
	a := admitWith(t, h, k, ticketFor(t, h, k.PublicKeyHex()), "first")
	if typ, e := a.answered(named("x", 1)); typ != wire.TypeRegistered {
		t.Fatalf("register: %q %q", typ, e.Message)
	}
	b := admitWith(t, h, k, ticketFor(t, h, k.PublicKeyHex()), "second")
	upgradeRefusedFull(t, h, "while the replacing link is pending")
	if typ, e := b.answered(named("x", 1)); typ != wire.TypeRegistered {
		t.Fatalf("the replacing register: %q %q", typ, e.Message)
	}
	if typ, data := a.next(); typ != wire.TypeError || !strings.Contains(string(data), wire.ReplacedMessage) {
		t.Fatalf("the replaced link told %s", data)
	}
	a.open() // a deleteAgent
	backToZero(t, h, "a link replaced")
	b.open()
	_ = a.ws.Close()
	backToZero(t, h, "a replaced link closed")

	standby := h.Peer("standby")
	// The leader's bound full again.
	pending := admit(t, h, 0xe7)
	upgradeRefusedFull(t, h, "the leader, full")
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(standby.URL, "http")+"/ws/provider", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the standby's upgrade: %v; want 503", err)
	}
	var body apierr.Body
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error.Code != apierr.CodeNotLeader {
		t.Fatalf("the standby answered %+v (%v); want %s", body, err, apierr.CodeNotLeader)
	}
	resp.Body.Close()
	if got := pendingNow(t, standby); got != "funduq_links_pending 0" {
		t.Fatalf("the standby counts %q", got)
	}
	pending.open()
}
