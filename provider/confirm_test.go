package provider

import (
	"slices"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/wire"
)

// confirmedIDs lists the retained runs funduq confirmed.
func confirmedIDs(c *Client) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id, rs := range c.retained {
		if rs.confirmed {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// waitConfirmed waits (at most guard) until funduq confirmed every run in ids.
func waitConfirmed(t *testing.T, c *Client, ids ...string) {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		got := confirmedIDs(c)
		if len(got) >= len(ids) && slices.Equal(got, ids) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("confirmed %v, want %v", got, ids)
		}
		time.Sleep(time.Millisecond)
	}
}

func lowSettle(c *Client) { c.syncSettle = time.Millisecond }

// After a reconnect the client resends only what funduq may not have: the
// runs it still holds, and finished runs whose finish funduq has not
// confirmed (two syncs answered after it, sync.go). A run funduq confirmed
// is not announced again — before, every run finished within Retention (5
// minutes) was resent after every reconnect.
func TestConfirmedFinishIsNotResentAfterReconnect(t *testing.T) {
	f := newFakeFunduq(t)
	f.setHooks(func(f *fakeFunduq) { f.answerSyncs = true })
	g := newGates()
	c, _ := startClient(t, baseConfig(t, f, reportAgent(g)), lowSettle)
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	g.release("r-1")
	expectFrames(t, p1, "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	waitConfirmed(t, c, "r-1")
	if n := p1.synced.Load(); n < 2 {
		t.Fatalf("r-1 confirmed after %d sync answers, want 2", n)
	}

	// Still held: announced again. Finished and confirmed: not.
	p1.send(t, runFrame("r-2", "a", "t-2", "hi"))
	p1.expectAck(t, "r-2")
	g.waitStarted(t)
	p1.expectEvent(t, "r-2", 1)
	p1.drop()
	p2 := f.registeredPeer(t)
	// Finished runs are announced before held ones: the held run's ack
	// first shows the confirmed one was left out.
	expectFrames(t, p2, "ack r-2 true", "event r-2 #1 RUN_STARTED")

	// A re-offer of the confirmed run (a broker that took over before the
	// claim was stored) is still answered from its frames, not run twice.
	p2.send(t, runFrame("r-1", "a", "t-1", "hi"))
	expectFrames(t, p2, "ack r-1 true", "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	noStart(t, c, g, "r-1")
	g.release("r-2")
	expectFrames(t, p2, "event r-2 #2 RUN_FINISHED", "finish r-2")
}

// A finish funduq read but did not outlive by a second sync is not
// confirmed: the broker that took it may have died before storing it. It
// is resent after the reconnect, and so is one funduq never read.
func TestFinishNotConfirmedTwiceIsResent(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	c, _ := startClient(t, baseConfig(t, f, reportAgent(g)), lowSettle)
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	g.release("r-1")
	expectFrames(t, p1, "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")
	// Only the first sync is answered (by hand: the fake drops syncs).
	c.mu.Lock()
	l := c.link
	c.mu.Unlock()
	deadline := time.Now().Add(guard)
	for {
		c.mu.Lock()
		id := l.syncID
		if id != "" {
			c.syncAnsweredLocked(l, id)
		}
		c.mu.Unlock()
		if id != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no sync sent after the finish")
		}
		time.Sleep(time.Millisecond)
	}
	if ids := confirmedIDs(c); len(ids) != 0 {
		t.Fatalf("confirmed %v after one sync", ids)
	}
	p1.drop()
	p2 := f.registeredPeer(t)
	expectFrames(t, p2, "ack r-1 true", "event r-1 #1 RUN_STARTED", "event r-1 #2 RUN_FINISHED", "finish r-1")

	// An error naming the finished run is an answer too: funduq does not
	// want it, and it is not resent again.
	p2.send(t, wire.Error{Type: wire.TypeError, Message: "finish refused: the run has ended", RunID: "r-1"})
	waitConfirmed(t, c, "r-1")
}

// funduq names why it refused a report after the kind ("event refused:
// unknown run"); the bare form of older brokers still counts.
func TestIsRefusal(t *testing.T) {
	for msg, want := range map[string]bool{
		"event refused": true, "finish refused": true, "ack refused: unknown run": true,
		"event refused: the run already reported its end": true, "finish refused: held by another link": true,
		"event refusedx": false, "unparseable frame": false, "": false, "refused": false,
	} {
		if got := isRefusal(msg); got != want {
			t.Errorf("isRefusal(%q) = %v, want %v", msg, got, want)
		}
	}
}
