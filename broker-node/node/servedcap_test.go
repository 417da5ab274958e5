package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/wire"
)

// named is a register frame of the agents prefix0 … prefix(n-1).
func named(prefix string, n int) []byte {
	return registerFrame(agentsNamed(n, func(i int) map[string]any { return map[string]any{"name": fmt.Sprint(prefix, i)} })...)
}

// servedOf says how many of key's agents the listing has, and how many of
// them online.
func servedOf(t *testing.T, h *nodetest.Harness, key string) (listed, online int) {
	t.Helper()
	for id, a := range listing(t, h) {
		if strings.HasPrefix(id, key[:4]+"/") {
			listed++
			if a.Online {
				online++
			}
		}
	}
	return listed, online
}

// A stranger holding many keys made the leader serve whatever its links
// registered: each key's register is bounded (FUNDUQ_MAX_AGENTS_PER_REGISTER),
// but not how many keys register. Past FUNDUQ_MAX_SERVED_AGENTS (12 here)
// a register that would add agents is refused with an error naming it, and
// nothing of it is registered; one that adds none (the same names again,
// or as many replaced) is answered "registered". An honest provider served
// before the cap filled is never withdrawn, keeps its places while its
// link is lost within the link grace, and takes them back on reconnecting;
// a link closed on purpose gives its places up.
func TestServedAgentsAreCapped(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) {
		c.MaxServedAgents = 12
		c.LinkGrace = time.Hour // the honest reconnect is within it however slow the machine
	})
	honest := admit(t, h, 0xb1)
	if typ, e := honest.answered(named("h", 4)); typ != wire.TypeRegistered {
		t.Fatalf("the honest register: %q %q", typ, e.Message)
	}
	s1, s2, s3 := admit(t, h, 0xb2), admit(t, h, 0xb3), admit(t, h, 0xb4)
	for i, s := range []*stranger{s1, s2} {
		if typ, e := s.answered(named("s", 4)); typ != wire.TypeRegistered {
			t.Fatalf("stranger %d within the cap: %q %q", i+1, typ, e.Message)
		}
	}
	refused := func(s *stranger, frame []byte, what string) {
		t.Helper()
		typ, e := s.answered(frame)
		if typ != wire.TypeError || !strings.Contains(e.Message, "FUNDUQ_MAX_SERVED_AGENTS") {
			t.Fatalf("%s: answered %q %q; want an error naming FUNDUQ_MAX_SERVED_AGENTS", what, typ, e.Message)
		}
	}
	refused(s3, named("s", 4), "a third stranger past the cap")
	refused(s3, named("s", 1), "one agent past the cap")
	refused(s2, named("s", 5), "a stranger growing past the cap")
	if typ, e := s2.answered(named("s", 4)); typ != wire.TypeRegistered {
		t.Fatalf("the same names again at the cap: %q %q", typ, e.Message)
	}
	if typ, e := s2.answered(named("t", 4)); typ != wire.TypeRegistered {
		t.Fatalf("as many names replaced at the cap: %q %q", typ, e.Message)
	}
	if listed, _ := servedOf(t, h, s3.pub); listed != 0 {
		t.Fatalf("the refused stranger has %d agents recorded", listed)
	}
	if _, online := servedOf(t, h, honest.pub); online != 4 {
		t.Fatalf("the honest provider has %d agents online, want 4", online)
	}

	// The honest link is lost without a close frame: its four places stay
	// its own for the link grace, and a stranger cannot take them.
	_ = honest.ws.Close()
	h.Eventually("the honest agents offline", func() bool { listed, online := servedOf(t, h, honest.pub); return listed == 4 && online == 0 })
	refused(s3, named("s", 4), "a stranger taking a lost link's places")
	back := admit(t, h, 0xb1)
	if typ, e := back.answered(named("h", 4)); typ != wire.TypeRegistered {
		t.Fatalf("the honest provider back within the link grace: %q %q", typ, e.Message)
	}
	if _, online := servedOf(t, h, honest.pub); online != 4 {
		t.Fatalf("the honest provider back has %d agents online, want 4", online)
	}

	// A stranger that closes its link on purpose gives its places up.
	if err := s1.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")); err != nil {
		t.Fatal(err)
	}
	h.Eventually("the closed stranger's agents offline", func() bool { _, online := servedOf(t, h, s1.pub); return online == 0 })
	if typ, e := s3.answered(named("s", 4)); typ != wire.TypeRegistered {
		t.Fatalf("a register into places given up: %q %q", typ, e.Message)
	}
	refused(s3, named("s", 5), "one more past the cap again")
	if _, online := servedOf(t, h, honest.pub); online != 4 {
		t.Fatalf("the honest provider has %d agents online at the end, want 4", online)
	}
}

// Around a takeover, the agents the previous leader served keep their
// places within provider_grace: strangers registering on the new leader
// before the honest provider is back cannot fill the cap past them, and
// the honest provider's register there is answered "registered".
func TestServedCapKeepsPlacesAcrossATakeover(t *testing.T) {
	a := nodetest.Start(t, func(c *config.Broker) {
		c.MaxServedAgents = 8
		c.ProviderGrace = time.Hour // the honest reconnect is within it however slow the machine
	})
	honest := admit(t, a, 0xc1)
	if typ, e := honest.answered(named("h", 4)); typ != wire.TypeRegistered {
		t.Fatalf("the honest register: %q %q", typ, e.Message)
	}
	b := a.Peer("node-b")
	a.Shutdown()
	b.Eventually("b leads", b.Ready)
	s1, s2 := admit(t, b, 0xc2), admit(t, b, 0xc3)
	if typ, e := s1.answered(named("s", 4)); typ != wire.TypeRegistered {
		t.Fatalf("a stranger within the cap: %q %q", typ, e.Message)
	}
	if typ, e := s2.answered(named("s", 1)); typ != wire.TypeError || !strings.Contains(e.Message, "FUNDUQ_MAX_SERVED_AGENTS") {
		t.Fatalf("a stranger taking the places of a provider expected back: %q %q", typ, e.Message)
	}
	back := admit(t, b, 0xc1)
	if typ, e := back.answered(named("h", 4)); typ != wire.TypeRegistered {
		t.Fatalf("the honest provider back on the new leader: %q %q", typ, e.Message)
	}
	if _, online := servedOf(t, b, honest.pub); online != 4 {
		t.Fatalf("the honest provider has %d agents online, want 4", online)
	}
}

// Within provider_grace after a leader starts (30 s by default, after a
// restart as after a takeover), the places agents served on this leader
// took were kept until the grace ended, whatever became of them: a register
// replacing its names left the old names holding places, and a link closed
// on purpose did not give its places up. A stranger that had replaced its
// names once, or a provider that had left, so filled the cap for others
// for the whole grace. Only what the previous leader served is kept.
func TestServedCapFreesPlacesWithinProviderGrace(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) {
		c.MaxServedAgents = 8
		c.ProviderGrace = time.Hour // the whole test runs within it
	})
	s1, s2, s3 := admit(t, h, 0xd1), admit(t, h, 0xd2), admit(t, h, 0xd3)
	if typ, e := s1.answered(named("s", 4)); typ != wire.TypeRegistered {
		t.Fatalf("a register within the cap: %q %q", typ, e.Message)
	}
	if typ, e := s1.answered(named("t", 4)); typ != wire.TypeRegistered {
		t.Fatalf("as many names replaced: %q %q", typ, e.Message)
	}
	// Four agents are served: four places are free.
	if typ, e := s2.answered(named("s", 4)); typ != wire.TypeRegistered {
		t.Fatalf("a register into the places a replace gave up: %q %q", typ, e.Message)
	}
	if err := s2.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")); err != nil {
		t.Fatal(err)
	}
	h.Eventually("the closed link's agents offline", func() bool { _, online := servedOf(t, h, s2.pub); return online == 0 })
	if typ, e := s3.answered(named("s", 4)); typ != wire.TypeRegistered {
		t.Fatalf("a register into the places a closed link gave up: %q %q", typ, e.Message)
	}
	if typ, e := s3.answered(named("s", 5)); typ != wire.TypeError || !strings.Contains(e.Message, "FUNDUQ_MAX_SERVED_AGENTS") {
		t.Fatalf("one more past the cap: %q %q", typ, e.Message)
	}
}

// registersWaiting counts the registers of the harness's database waiting
// on a lock (one Hold keeps).
func registersWaiting(t *testing.T, h *nodetest.Harness) int {
	t.Helper()
	var n int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO providers%'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Two links of one key at the cap: one replaces a name it serves (its
// register adds none: it drops as many as it adds) while the other
// registers that very name (served, so it adds none either). Each was
// counted against the roster as it stood before the other's change, and
// both were answered "registered": five agents served under a cap of
// four, and repeated, a key's links grew the roster past the cap without
// end. The name a register drops is counted free for that register only.
func TestServedCapHoldsAgainstALinkTakingADroppedName(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxServedAgents = 4 })
	filler := admit(t, h, 0xe1)
	if typ, e := filler.answered(named("f", 2)); typ != wire.TypeRegistered {
		t.Fatalf("the filler's register: %q %q", typ, e.Message)
	}
	l1 := admit(t, h, 0xe2)
	if typ, e := l1.answered(registerFrame(map[string]any{"name": "a"}, map[string]any{"name": "x"})); typ != wire.TypeRegistered {
		t.Fatalf("the first link's register: %q %q", typ, e.Message)
	}
	l2 := admit(t, h, 0xe2)
	release := h.Hold(`SELECT 1 FROM providers WHERE public_key = $1 FOR UPDATE`, l1.pub)
	l1.send(registerFrame(map[string]any{"name": "x"}, map[string]any{"name": "b"}))
	h.Eventually("the replacing register waits on the lock", func() bool { return registersWaiting(t, h) == 1 })
	l2.send(registerFrame(map[string]any{"name": "a"}))
	answer2 := make(chan []byte, 1)
	go func() {
		_ = l2.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, data, _ := l2.ws.ReadMessage()
		answer2 <- data
	}()
	// Either the second register is answered at its check or it is past
	// it, waiting on the lock as well.
	h.Eventually("the second register checked", func() bool { return len(answer2) > 0 || registersWaiting(t, h) == 2 })
	release()
	typ1, _ := l1.next()
	data2 := <-answer2
	typ2, _ := wire.PeekType(data2)
	if typ1 == wire.TypeRegistered && typ2 == wire.TypeRegistered {
		t.Fatalf("both registers answered registered: five agents served under a cap of four")
	}
	for _, d := range [][]byte{data2} {
		if typ, _ := wire.PeekType(d); typ == wire.TypeError && !strings.Contains(string(d), "FUNDUQ_MAX_SERVED_AGENTS") {
			t.Fatalf("the refusal does not name the cap: %s", d)
		}
	}
}

// A link lost without a close frame keeps its places for the link grace
// and gives them up when it ends: a stranger refused meanwhile is
// answered "registered" once the grace is over on the broker's clock.
func TestServedCapFreesALostLinksPlacesAfterTheLinkGrace(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) {
		c.MaxServedAgents = 4
		c.LinkGrace = time.Minute
		c.RegisterDeadline = time.Hour // the refused stranger stays to try again
	})
	lost, s := admit(t, h, 0xf1), admit(t, h, 0xf2)
	if typ, e := lost.answered(named("l", 4)); typ != wire.TypeRegistered {
		t.Fatalf("a register within the cap: %q %q", typ, e.Message)
	}
	_ = lost.ws.Close()
	h.Eventually("the lost link's agents offline", func() bool { _, online := servedOf(t, h, lost.pub); return online == 0 })
	if typ, e := s.answered(named("s", 1)); typ != wire.TypeError || !strings.Contains(e.Message, "FUNDUQ_MAX_SERVED_AGENTS") {
		t.Fatalf("a register into a lost link's places within the grace: %q %q", typ, e.Message)
	}
	h.Clock.Advance(time.Minute)
	h.Eventually("the lost link's places free after the grace", func() bool {
		h.Clock.Advance(time.Second) // the sweep's tick
		typ, _ := s.answered(named("s", 4))
		return typ == wire.TypeRegistered
	})
}
