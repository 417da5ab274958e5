package scaling

import (
	"context"
	"strings"
	"testing"
	"time"
)

// S1: a run started at a door other than the one in use, for an agent whose
// link is on the leader, is offered; every door lists the agent online.
func TestS1CrossNodeDispatch(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	bk := newBook()
	p := c.connectProvider(newSigner(t, 0x11), bk, l.url, l.url)
	p.register("prober")
	// "served" is read from shared storage: every door shows the agent online.
	bound := margin
	for _, d := range c.doors {
		if ok, took := until(bound, func() bool { return c.agentOnline(d, p.key, "prober") }); !ok {
			t.Errorf("door %s does not list prober online within %v", d.name, bound)
		} else {
			t.Logf("door %s lists prober online after %v (bound %v)", d.name, took.Round(time.Millisecond), bound)
		}
	}
	// Start once on every door, the second door first.
	offerBound := deliverTimeout + margin
	for _, d := range []*proc{c.doors[1], c.doors[0]} {
		began := time.Now()
		s := c.start(d, p.key, "prober", "hello")
		f := p.offer(offerBound)
		took := time.Since(began)
		if f.RunID != s.runID {
			t.Fatalf("offered %s, started %s", f.RunID, s.runID)
		}
		t.Logf("run %s started at door %s reached the provider on leader %s in %v (bound %v: NOTIFY + one poll tick, hang guard)",
			s.runID, d.name, l.name, took.Round(time.Millisecond), offerBound)
		if r := c.run(s.runID); r.Status == "failed" {
			t.Errorf("run %s is %s/%s", s.runID, r.Status, r.Reason)
		}
		p.accept(f.RunID)
		p.event(f.RunID, 1, startedEv(*f.ThreadID, f.RunID))
		p.complete(f.RunID, *f.ThreadID, 2)
		evs := s.waitClosed(t, margin)
		checkStream(t, "door "+d.name, evs, 0, true)
		r, _ := c.waitTerminal(s.runID, margin)
		if r.Status != "completed" {
			t.Errorf("run %s ended %s/%s", s.runID, r.Status, r.Reason)
		}
		c.checkLedger(s.runID)
	}
	bk.checkOnce(t)
}

// S2: a ticket from any broker node admits a link at the leader; a standby
// refuses the link without spending the ticket and names the leader; a
// replayed, expired or foreign-key ticket is refused.
func TestS2TicketAtAnyNode(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	s := c.brokers[1]
	if s == l {
		s = c.brokers[0]
	}
	sg := newSigner(t, 0x12)
	key := sg.PublicKeyHex()
	for _, issuer := range []*proc{l, s} {
		tr, code := ticket(t, issuer.url, key)
		if code != 201 {
			t.Fatalf("ticket at %s: %d", issuer.name, code)
		}
		p, ref := c.openLink(sg, nil, tr, l.url)
		if ref != nil {
			t.Fatalf("a ticket from %s was refused at leader %s: %+v", issuer.name, l.name, *ref)
		}
		t.Logf("a ticket from %s admitted a link at leader %s", issuer.name, l.name)
		p.close()
		// Replayed at the leader: refused.
		if p2, ref := c.openLink(sg, nil, tr, l.url); ref == nil {
			p2.close()
			t.Errorf("a ticket from %s admitted a second link (replay)", issuer.name)
		} else {
			t.Logf("replay of %s's ticket at %s refused: %s", issuer.name, l.name, ref.Body)
		}
	}
	for _, d := range c.doors {
		_, code := ticket(t, d.url, key)
		t.Logf("POST /tickets at door %s answers %d (D11: broker nodes issue tickets; doors do not)", d.name, code)
	}
	// A standby refuses the link-open without spending the ticket, naming
	// the leader; the same ticket then works at the leader.
	tr, _ := ticket(t, s.url, key)
	_, ref := c.openLink(sg, nil, tr, s.url)
	if ref == nil || ref.Status != 503 || ref.RetryAfter == "" || ref.Leader != l.url {
		t.Fatalf("standby %s answered the link-open with %+v; want 503, Retry-After and leader %s", s.name, ref, l.url)
	}
	t.Logf("standby %s: 503, Retry-After %s, leader %s", s.name, ref.RetryAfter, ref.Leader)
	p, ref := c.openLink(sg, nil, tr, ref.Leader)
	if ref != nil {
		t.Fatalf("after the standby's redirect the ticket was refused at the leader: %+v", *ref)
	}
	p.close()
	// A ticket presented by another key is refused and not spent.
	tr, _ = ticket(t, l.url, key)
	other := newSigner(t, 0x13)
	if p, ref := c.openLink(other, nil, tr, l.url); ref == nil {
		p.close()
		t.Errorf("a ticket bound to %s admitted key %s", key[:8], other.PublicKeyHex()[:8])
	}
	if p, ref := c.openLink(sg, nil, tr, l.url); ref != nil {
		t.Errorf("a ticket presented first by another key was spent: %+v", *ref)
	} else {
		p.close()
	}
	// An expired ticket is refused (its 60 s validity is cut short in Redis).
	tr, _ = ticket(t, l.url, key)
	if n, err := c.rdb.PExpire(context.Background(), prefix+"ticket:"+tr.Ticket, time.Millisecond).Result(); err != nil || !n {
		t.Fatalf("could not expire the ticket key %sticket:…: %v %v", prefix, n, err)
	}
	time.Sleep(20 * time.Millisecond)
	if p, ref := c.openLink(sg, nil, tr, l.url); ref == nil {
		p.close()
		t.Errorf("an expired ticket admitted a link")
	}
}

// inFlight starts a run at door d for prober and has p accept it and report
// RUN_STARTED (provider seq 1); it returns the run id and thread id.
func (c *cluster) inFlight(p *wprov, d *proc) (string, string, *stream) {
	c.t.Helper()
	s := c.start(d, p.key, "prober", "hello")
	f := p.offer(deliverTimeout + margin)
	p.accept(f.RunID)
	p.event(f.RunID, 1, startedEv(*f.ThreadID, f.RunID))
	c.waitStatus(f.RunID, margin, "running", func(r runRow) bool { return r.Status == "running" && r.LastSeq >= 1 })
	return f.RunID, *f.ThreadID, s
}

// S3: booting a door, a standby, and restarting a door leave a live run
// alone: still running under the same epoch, held by the same leader, and
// it completes.
func TestS3BootingReplicaLeavesLiveRunsAlone(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	p := c.connectProvider(newSigner(t, 0x14), newBook(), l.url, l.url)
	p.register("prober")
	id, thread, _ := c.inFlight(p, c.doors[0])
	before := c.run(id)
	epoch := c.epoch()
	check := func(what string) {
		t.Helper()
		time.Sleep(300 * time.Millisecond) // let a booted process do whatever it does at start
		r := c.run(id)
		if r.Status != "running" || r.Epoch != before.Epoch || c.epoch() != epoch || c.leader() != l {
			t.Errorf("after %s: run %s/%s owner_epoch %d (was %d), leader epoch %d (was %d), leader %v",
				what, r.Status, r.Reason, r.Epoch, before.Epoch, c.epoch(), epoch, c.leader())
		} else {
			t.Logf("after %s: run still running under epoch %d, leader %s unchanged", what, r.Epoch, l.name)
		}
	}
	c.startDoor("d3")
	check("booting door d3")
	c.startBroker("n3")
	check("booting standby n3")
	c.doors[0].term(t)
	c.startDoor("d1b")
	check("a rolling restart of door d1")
	p.complete(id, thread, 2)
	r, _ := c.waitTerminal(id, margin)
	if r.Status != "completed" {
		t.Errorf("run ended %s/%s", r.Status, r.Reason)
	}
	c.checkLedger(id)
}

// S4: once a run is declared dead by a legitimate route (a new leader's
// reap after provider_grace), nothing the provider reports lands in it —
// neither on its socket to the deposed leader nor on a new link.
func TestS4NothingLandsInDeadRun(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	sg := newSigner(t, 0x15)
	p := c.connectProvider(sg, newBook(), l.url, l.url)
	p.register("prober")
	id, thread, _ := c.inFlight(p, c.doors[1])
	l.freeze()
	frozeAt := time.Now()
	takeBound := leaseTTL + margin
	s := c.waitLeader(takeBound, l)
	t.Logf("leader %s frozen; %s leads after %v (bound TTL + margin = %v)", l.name, s.name, time.Since(frozeAt).Round(time.Millisecond), takeBound)
	reapBound := leaseTTL + providerGrace + 2*margin
	r, _ := c.waitTerminal(id, reapBound)
	t.Logf("run %s: %s/%s %v after the freeze (bound TTL + grace + 2 margins = %v)", id, r.Status, r.Reason, time.Since(frozeAt).Round(time.Millisecond), reapBound)
	if r.Status != "failed" || r.Reason != "orphaned_by_funduq_restart" {
		t.Errorf("run reaped as %s/%s, want failed/orphaned_by_funduq_restart", r.Status, r.Reason)
	}
	n := len(c.events(id))
	// The deposed leader wakes; the provider reports on its old socket.
	l.thaw()
	p.event(id, 2, deltaEv("m1", "still here"))
	// The deposed leader handles the report before it answers a query
	// after it, or steps down and closes the link unanswered.
	t.Logf("the deposed leader answered a query after the report: %v", p.settled(afterFailover))
	// And on a new link to the new leader, with the same key.
	p2 := c.connectProvider(sg, newBook(), s.url, s.url)
	p2.register("prober")
	p2.event(id, 3, deltaEv("m1", "still here 2"))
	p2.finish(id)
	if f, ok := p2.next("error", margin); ok {
		t.Logf("the new leader answered the report for the dead run: %s", f.raw)
	} else {
		t.Errorf("no typed answer to a report for a dead run within %v (a silent drop)", margin)
	}
	if !p2.settled(margin) {
		t.Fatalf("the new leader closed the link instead of answering a query after the reports (%s)", p2.closeReason())
	}
	evs := c.events(id)
	for _, e := range evs {
		if strings.Contains(e.Raw, "still here") {
			t.Errorf("a report landed in the dead run: seq %d %s", e.Seq, e.Raw)
		}
	}
	if len(evs) != n {
		t.Errorf("%d events after the verdict, %d before", len(evs), n)
	}
	if r := c.run(id); r.Status != "failed" {
		t.Errorf("the dead run now reads %s", r.Status)
	}
	c.checkLedger(id)
	_ = thread
}

// S5: a provider whose link-open lands on a standby is redirected to the
// leader; its reports then land exactly once, visible from every door.
func TestS5ReportAtWrongNode(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	s := c.brokers[1]
	_, ref, err := dialProvider(s.url)
	if err != nil || ref == nil || ref.Status != 503 || ref.Leader != l.url || ref.RetryAfter == "" {
		t.Fatalf("standby link-open: %+v %v; want 503 + Retry-After naming %s", ref, err, l.url)
	}
	t.Logf("standby %s redirects: 503, Retry-After %s, leader %s", s.name, ref.RetryAfter, ref.Leader)
	bk := newBook()
	sg := newSigner(t, 0x16)
	c.sdkProvider(sg, s.url, tickAgent("prober", bk, 2, 20*time.Millisecond)) // pointed at the standby
	st := c.start(c.doors[1], sg.PublicKeyHex(), "prober", "hi")
	evs := st.waitClosed(t, deliverTimeout+2*margin)
	checkStream(t, "the starting door's stream", evs, 0, true)
	r, _ := c.waitTerminal(st.runID, margin)
	if r.Status != "completed" {
		t.Errorf("run %s/%s", r.Status, r.Reason)
	}
	for _, d := range c.doors {
		f := c.follow(d, st.runID, -1)
		got := f.waitClosed(t, margin)
		checkStream(t, "door "+d.name, got, 0, true)
		n := 0
		for _, e := range got {
			if strings.Contains(e.Data, "tick 1") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("door %s shows the delta \"tick 1\" %d times", d.name, n)
		}
	}
	c.checkLedger(st.runID)
	bk.checkOnce(t)
}

// S6: a stream opened at a door that never saw the run delivers the
// leader's events in order, once, and closes on the terminal event; a late
// subscribe replays the whole log; a cursor resumes mid-run.
func TestS6StreamAtWrongDoor(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	p := c.connectProvider(newSigner(t, 0x17), newBook(), l.url, l.url)
	p.register("prober")
	id, thread, s1 := c.inFlight(p, c.doors[0])
	s2 := c.follow(c.doors[1], id, -1)
	time.Sleep(200 * time.Millisecond)
	sent := time.Now()
	p.event(id, 2, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.event(id, 3, deltaEv("m1", "one"))
	p.event(id, 4, deltaEv("m1", "two"))
	p.event(id, 5, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.event(id, 6, finishedEv(thread, id))
	p.finish(id)
	bound := margin
	got := s2.waitClosed(t, bound)
	t.Logf("door d2 (never saw the run) relayed %s; last event %v after it was sent (bound %v)",
		describe(got), got[len(got)-1].At.Sub(sent).Round(time.Millisecond), bound)
	checkStream(t, "door d2", got, 0, true)
	checkStream(t, "door d1", s1.waitClosed(t, bound), 0, true)
	if len(got) < 6 || !strings.Contains(got[2].Data, "one") || !strings.Contains(got[3].Data, "two") {
		t.Errorf("door d2 did not relay one, two in order: %s", describe(got))
	}
	late := c.follow(c.doors[1], id, -1).waitClosed(t, bound)
	checkStream(t, "a late subscribe at d2", late, 0, true)
	if len(late) != len(got) {
		t.Errorf("the late subscribe replayed %d events, the live one %d", len(late), len(got))
	}
	mid := c.follow(c.doors[0], id, 3).waitClosed(t, bound)
	checkStream(t, "a resume at d1 after seq 3", mid, 3, true)
	if len(mid) == 0 || mid[0].ID != 4 && mid[0].ID != 0 {
		t.Errorf("resume after 3 started with %s", describe(mid))
	}
	c.checkLedger(id)
}

// S7: the leader is killed with a run in flight and its provider never
// comes back: the run fails orphaned_by_funduq_restart within TTL +
// takeover + grace + a reap tick, the open stream ends with RUN_ERROR, and
// every door reads the same outcome.
func TestS7OwnerDiesRunGetsVerdict(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	p := c.connectProvider(newSigner(t, 0x18), newBook(), l.url, l.url)
	p.register("prober")
	id, _, _ := c.inFlight(p, c.doors[1])
	s1 := c.follow(c.doors[0], id, -1)
	at := c.run(id)
	l.kill(t)
	killed := time.Now()
	t.Logf("run read %s under epoch %d at the leader's death", at.Status, at.Epoch)
	bound := leaseTTL + margin + providerGrace + margin
	r, _ := c.waitTerminal(id, bound)
	took := time.Since(killed)
	t.Logf("run %s: %s/%s %v after SIGKILL (bound T = TTL + takeover margin + grace + reap margin = %v)", id, r.Status, r.Reason, took.Round(time.Millisecond), bound)
	if r.Status != "failed" || r.Reason != "orphaned_by_funduq_restart" {
		t.Errorf("verdict %s/%s, want failed/orphaned_by_funduq_restart", r.Status, r.Reason)
	}
	evs := s1.waitClosed(t, margin)
	checkStream(t, "door d1's open stream", evs, 0, true)
	if len(evs) == 0 || evs[len(evs)-1].Type != "RUN_ERROR" {
		t.Errorf("door d1's stream did not end with RUN_ERROR: %s", describe(evs))
	}
	for _, d := range c.doors {
		got := c.follow(d, id, -1).waitClosed(t, margin)
		if len(got) == 0 || got[len(got)-1].Type != "RUN_ERROR" {
			t.Errorf("door %s reads %s", d.name, describe(got))
		}
	}
	c.checkLedger(id)
}

// S8: the leader is killed; the provider re-attaches (its first attempts
// land on the standby) within provider_grace, says it holds the run, resends
// what may be lost and carries on: the run completes under the new epoch,
// every event stored once, and new runs are offered to the new link.
func TestS8ReattachedProviderCarriesOn(t *testing.T) {
	c := newCluster(t, 2, 2)
	l := c.waitLeader(boot)
	s := c.brokers[1]
	bk := newBook()
	sg := newSigner(t, 0x19)
	p := c.connectProvider(sg, bk, l.url, l.url)
	p.register("prober")
	id, thread, _ := c.inFlight(p, c.doors[0])
	p.event(id, 2, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	c.waitStatus(id, margin, "2 events stored", func(r runRow) bool { return r.LastSeq >= 2 })
	l.kill(t)
	killed := time.Now()
	if !p.waitClosed(margin) {
		t.Fatalf("the provider's link to the killed leader did not close")
	}
	// Re-attach through the standby: 503 until it leads.
	var p2 *wprov
	bound := leaseTTL + margin
	attempts := 0
	ok, _ := until(bound, func() bool {
		attempts++
		tr, code := ticket(t, s.url, sg.PublicKeyHex())
		if code != 201 {
			return false
		}
		var ref *refusal
		p2, ref = c.openLink(sg, bk, tr, s.url)
		if ref != nil {
			if attempts == 1 {
				t.Logf("first re-attach attempt at %s: %d Retry-After %q leader %q", s.name, ref.Status, ref.RetryAfter, ref.Leader)
			}
			time.Sleep(100 * time.Millisecond)
			return false
		}
		return true
	})
	if !ok {
		t.Fatalf("the provider could not re-attach at %s within %v", s.name, bound)
	}
	t.Logf("re-attached at %s %v after SIGKILL, attempt %d (bound TTL + margin = %v; grace %v)", s.name,
		time.Since(killed).Round(time.Millisecond), attempts, bound, providerGrace)
	p2.register("prober")
	p2.adopt(id)
	p2.accept(id)                                                                        // "I hold it" (what our SDK sends on re-attach)
	p2.event(id, 2, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`) // a resend
	p2.event(id, 3, deltaEv("m1", "carried on"))
	p2.event(id, 4, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p2.event(id, 5, finishedEv(thread, id))
	p2.finish(id)
	r, _ := c.waitTerminal(id, providerGrace+margin)
	if r.Status != "completed" || r.Epoch != c.epoch() {
		t.Errorf("run %s/%s under epoch %d (leader epoch %d), want completed under the new epoch", r.Status, r.Reason, r.Epoch, c.epoch())
	}
	evs := c.events(id)
	if len(evs) != 5 {
		t.Errorf("%d events stored, want 5 (the resend stored once)", len(evs))
	}
	got := c.follow(c.doors[1], id, -1).waitClosed(t, margin)
	checkStream(t, "door d2", got, 0, true)
	c.checkLedger(id)
	// New runs for the agent go to the re-attached link.
	st := c.start(c.doors[1], sg.PublicKeyHex(), "prober", "again")
	f := p2.offer(deliverTimeout + margin)
	if f.RunID != st.runID {
		t.Fatalf("offered %s, started %s", f.RunID, st.runID)
	}
	p2.accept(f.RunID)
	p2.event(f.RunID, 1, startedEv(*f.ThreadID, f.RunID))
	p2.complete(f.RunID, *f.ThreadID, 2)
	checkStream(t, "the new run", st.waitClosed(t, margin), 0, true)
	bk.checkOnce(t)
}
