package scaling

// Outside checks of the deferred offering write (commit b4bd09c): an offer
// out to a provider leaves the run's record queued until it has been out
// FUNDUQ_OFFERING_WRITE_AFTER unanswered; an answer sooner claims the run
// from queued. Everything here is seen as a stranger sees it: real broker
// and door processes, a provider speaking the raw wire over a real
// WebSocket (wprov, not our SDK), the caller's SSE stream, the run's row,
// what the provider was offered. The clusters run with a write delay long
// enough to answer before it on a loaded machine, and a deliver timeout
// longer than that delay.
//
//	go test -race -count=1 -run 'TestOffering' ./broker-node/scaling/ -v
//	go test -race -count=1 -run 'TestOffering' ./broker-node/scaling/ -offering.seed=N   # one seed again

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

var offeringSeed = flag.Uint64("offering.seed", 0, "the seed of the offering tests' fault moments (0: from the clock, logged)")

const (
	// offerAfter is these clusters' FUNDUQ_OFFERING_WRITE_AFTER.
	offerAfter = 800 * time.Millisecond
	// offerDeliver is these clusters' FUNDUQ_DELIVER_TIMEOUT: an offer
	// lapses well after its offering write fell due.
	offerDeliver = 2500 * time.Millisecond
	// quickSlack: an answer that leaves within offerAfter - quickSlack of
	// the offer frame's arrival left before the write was due (the slack
	// covers the provider's reader being late to read the frame).
	quickSlack = 300 * time.Millisecond
	// offerUnserved is these clusters' FUNDUQ_UNSERVED_TIMEOUT (see
	// newOfferingCluster).
	offerUnserved = 10 * time.Minute
	// quick is the window in which a scenario treats an answer (or a
	// fault) as landing before the write is due.
	quick = offerAfter - quickSlack
)

// newOfferingCluster is newCluster with offerAfter and offerDeliver.
func newOfferingCluster(t *testing.T, nbrokers, ndoors int) *cluster {
	t.Helper()
	// The sweep asks every waiting head again once per unserved window
	// (design.md §Timers): with the harness's 5 s it could re-offer a
	// lapsed run between its lapse and the late accept a scenario sends
	// next — an offer the scenario counts — whenever the machine is slow
	// enough to widen that gap. No scenario here waits on that nudge.
	clusterEnv = []string{"FUNDUQ_OFFERING_WRITE_AFTER=" + offerAfter.String(), "FUNDUQ_DELIVER_TIMEOUT=" + offerDeliver.String(),
		"FUNDUQ_UNSERVED_TIMEOUT=" + offerUnserved.String()}
	defer func() { clusterEnv = nil }()
	t.Logf("FUNDUQ_OFFERING_WRITE_AFTER=%v FUNDUQ_DELIVER_TIMEOUT=%v FUNDUQ_LEASE_TTL=%v FUNDUQ_UNSERVED_TIMEOUT=%v; an answer within %v of the offer is before the write",
		offerAfter, offerDeliver, leaseTTL, offerUnserved, quick)
	return newCluster(t, nbrokers, ndoors)
}

func seeded(t *testing.T) *rand.Rand {
	seed := *offeringSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("fault moments seeded with %d (rerun: go test -race -count=1 -run '^%s$' ./broker-node/scaling/ -offering.seed=%d)",
		seed, strings.SplitN(t.Name(), "/", 2)[0], seed)
	return rand.New(rand.NewPCG(seed, 0xfeed))
}

// ---------------------------------------------------------------- provider side

// offerAt waits (at most bound) for a run frame and returns it with the
// moment the provider's reader took it off the socket.
func (p *wprov) offerAt(bound time.Duration) (wire.RunFrame, time.Time) {
	p.t.Helper()
	f, ok := p.next(wire.TypeRun, bound)
	if !ok {
		p.t.Fatalf("no offer within %v (%s)", bound, p.closeReason())
	}
	var rf wire.RunFrame
	if err := json.Unmarshal(f.raw, &rf); err != nil || rf.ThreadID == nil {
		p.t.Fatalf("offer frame %s: %v", f.raw, err)
	}
	return rf, f.at
}

func (p *wprov) decline(id string) {
	no := false
	p.send(wire.Ack{Type: wire.TypeAck, RunID: id, Accepted: &no})
}

func (p *wprov) refuse(id, reason string) {
	no := false
	p.send(wire.Ack{Type: wire.TypeAck, RunID: id, Accepted: &no, Reason: &reason})
}

// answerRun streams RUN_STARTED, a short answer, RUN_FINISHED and finish.
func (p *wprov) answerRun(f wire.RunFrame) {
	p.event(f.RunID, 1, startedEv(*f.ThreadID, f.RunID))
	p.complete(f.RunID, *f.ThreadID, 2)
}

// barrier is a round trip on the link: every frame the broker wrote to it
// before answering this register has been read when it returns. (It also
// has the link's lanes tried again: only for a run no offer may reach.)
func (p *wprov) barrier(agent string) { p.register(agent) }

// cut drops the link without a close frame.
func (p *wprov) cut() { p.close() }

// leave closes the link with a close frame, as a provider shutting down.
func (p *wprov) leave() {
	p.wmu.Lock()
	_ = p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
	p.wmu.Unlock()
	if !p.waitClosed(margin) {
		p.t.Errorf("the broker did not close the link within %v of the provider's close frame", margin)
	}
	p.close()
}

// claimedAgain waits (at most bound) for run id to read running under
// epoch, accepting any offer of it meanwhile: a provider holding a run
// across a failover, as it behaves whichever way its first accept went.
func (p *wprov) claimedAgain(c *cluster, id string, epoch int64, bound time.Duration) {
	p.t.Helper()
	ok, _ := until(bound, func() bool {
		if p.has(wire.TypeRun) {
			if f, ok := p.next(wire.TypeRun, 0); ok {
				var rf wire.RunFrame
				_ = json.Unmarshal(f.raw, &rf)
				p.accept(rf.RunID)
			}
		}
		r := c.run(id)
		return r.Status == "running" && r.Epoch == epoch
	})
	if !ok {
		r := c.run(id)
		p.t.Fatalf("run %s not claimed again under epoch %d within %v: %s under %d", id, epoch, bound, r.Status, r.Epoch)
	}
}

// offered is how many run frames for id the book saw, on every link.
func (b *book) offered(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.offers[id]
}

// ---------------------------------------------------------------- caller side

// checkAnswered asserts what the caller of a completed run sees: the run is
// completed, its stream closed with RUN_FINISHED for this run, no gap or
// duplicate, the answer's text exactly once, and the provider's handler
// started once.
func (c *cluster) checkAnswered(t *testing.T, st *stream, id string, bound time.Duration, bk *book) runRow {
	t.Helper()
	r, _ := c.waitTerminal(id, bound)
	if r.Status != "completed" {
		t.Errorf("run %s ended %s/%s, want completed", id, r.Status, r.Reason)
	}
	evs := st.waitClosed(t, afterFailover)
	checkStream(t, "run "+id, evs, 0, true)
	hellos, finished := 0, 0
	for _, e := range evs {
		if strings.Contains(e.Data, `"delta":"hello"`) {
			hellos++
		}
		if e.Type == "RUN_FINISHED" {
			finished++
			if !strings.Contains(e.Data, id) {
				t.Errorf("run %s: its stream's RUN_FINISHED names another run: %s", id, e.Data)
			}
		}
	}
	if hellos != 1 || finished != 1 {
		t.Errorf("run %s: the caller saw the answer %d times and RUN_FINISHED %d times, want once each: %s", id, hellos, finished, describe(evs))
	}
	c.checkLedger(id)
	if n := bk.startsOf(id); n != 1 {
		t.Errorf("run %s: the provider's handler started %d times, want once", id, n)
	}
	return r
}

// ---------------------------------------------------------------- broker side, as an operator reads it

// claimedFrom is the status the broker's log says run id was claimed from
// ("" when no claim is logged).
func (c *cluster) claimedFrom(id string) string {
	for _, b := range c.brokers {
		for _, line := range strings.Split(b.grep(id), "\n") {
			if !strings.Contains(line, "run claimed") {
				continue
			}
			for _, from := range []string{"queued", "offering"} {
				if strings.Contains(line, `"from":"`+from+`"`) || strings.Contains(line, "from="+from) {
					return from
				}
			}
		}
	}
	return ""
}

// wroteOffering reports whether a broker's log records run id's status
// written offering.
func (c *cluster) wroteOffering(id string) bool {
	for _, b := range c.brokers {
		for _, line := range strings.Split(b.grep(id), "\n") {
			if strings.Contains(line, "run status written") && (strings.Contains(line, `"status":"offering"`) || strings.Contains(line, "status=offering")) {
				return true
			}
		}
	}
	return false
}

// backendsOf lists the PostgreSQL backends serving process p's connections
// to the cluster's database: p's sockets (/proc/<pid>/fd) by their local
// port (/proc/net/tcp) against pg_stat_activity.client_port.
func (c *cluster) backendsOf(p *proc) []int32 {
	c.t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", p.PID())
	fds, err := os.ReadDir(dir)
	if err != nil {
		c.t.Fatalf("%s: %v", p.name, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var ports []int32
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			local := f[1][strings.LastIndex(f[1], ":")+1:]
			if port, err := strconv.ParseInt(local, 16, 32); err == nil {
				ports = append(ports, int32(port))
			}
		}
	}
	rows, err := c.db.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND client_port = ANY($1) AND pid <> pg_backend_pid()`, ports)
	if err != nil {
		c.t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		c.t.Fatal(err)
	}
	return pids
}

// terminate is pg_terminate_backend of pids; it returns how many went.
func (c *cluster) terminate(pids []int32) int {
	c.t.Helper()
	var n int
	if err := c.db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE pg_terminate_backend(p))
		FROM unnest($1::int[]) AS p`, pids).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// ---------------------------------------------------------------- (a)–(e), strangers, two callers

// TestOfferingRawProvider: a provider that is not our SDK answers offers
// at every moment around the deferred offering write. Each subtest has
// its own provider key and thread; one cluster serves them all.
func TestOfferingRawProvider(t *testing.T) {
	c := newOfferingCluster(t, 1, 2)
	l := c.waitLeader(boot)
	var keyByte byte = 0x60
	provider := func(t *testing.T) (*wprov, *identity.Signer, *book) {
		keyByte++
		sg := newSigner(t, keyByte)
		bk := newBook()
		cc := *c
		cc.t = t
		p := cc.connectProvider(sg, bk, l.url, l.url)
		p.register("probe")
		return p, sg, bk
	}
	sub := func(t *testing.T) *cluster { cc := *c; cc.t = t; return &cc }
	bound := offerDeliver + margin

	// The fast path: an accept before the write claims the run from
	// queued; while the offer is out unanswered the record says queued.
	t.Run("accept at once", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", "hi")
		f, at := p.offerAt(bound)
		r := c.run(f.RunID)
		if time.Since(at) < quick && r.Status != "queued" {
			t.Errorf("the record says %s %v after the offer arrived, before FUNDUQ_OFFERING_WRITE_AFTER (%v)", r.Status, time.Since(at).Round(time.Millisecond), offerAfter)
		}
		p.accept(f.RunID)
		answeredIn := time.Since(at)
		p.answerRun(f)
		c.checkAnswered(t, st, f.RunID, bound, bk)
		from := c.claimedFrom(f.RunID)
		t.Logf("accepted %v after the offer arrived; the broker claimed it from %q; offering written: %v", answeredIn.Round(time.Millisecond), from, c.wroteOffering(f.RunID))
		if answeredIn < quick && (from != "queued" || c.wroteOffering(f.RunID)) {
			t.Errorf("an accept %v after the offer (write due after %v) was claimed from %q, offering written %v; want from queued, never offering",
				answeredIn.Round(time.Millisecond), offerAfter, from, c.wroteOffering(f.RunID))
		}
	})

	// (a) A decline before the write: the run stays queued, is offered
	// again when the provider's agents change, and runs once.
	t.Run("decline at once", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[1], sg.PublicKeyHex(), "probe", "hi")
		f, at := p.offerAt(bound)
		p.decline(f.RunID)
		declinedIn := time.Since(at)
		p.register("probe") // its agents change: its lanes are tried again
		f2, at2 := p.offerAt(bound)
		if f2.RunID != f.RunID {
			t.Fatalf("offered %s after the decline, want %s again", f2.RunID, f.RunID)
		}
		if r := c.run(f.RunID); time.Since(at2) < quick && r.Status != "queued" {
			t.Errorf("offered again, the record says %s, want queued", r.Status)
		}
		p.accept(f2.RunID)
		p.answerRun(f2)
		c.checkAnswered(t, st, f.RunID, bound, bk)
		if n := bk.offered(f.RunID); n != 2 {
			t.Errorf("run offered %d times, want twice (the declined offer and the one after register)", n)
		}
		t.Logf("declined %v after the offer; offered again; completed (claimed from %q)", declinedIn.Round(time.Millisecond), c.claimedFrom(f.RunID))
	})

	// (a) A refusal before the write fails the run with the provider's
	// reason, verbatim, and it is never offered again.
	t.Run("refuse at once", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", "hi")
		f, at := p.offerAt(bound)
		const why = "probe refuses: envelope not to its taste"
		p.refuse(f.RunID, why)
		refusedIn := time.Since(at)
		r, _ := c.waitTerminal(f.RunID, bound)
		if r.Status != "failed" || r.Reason != why {
			t.Errorf("refused run ended %s/%q, want failed/%q", r.Status, r.Reason, why)
		}
		evs := st.waitClosed(t, afterFailover)
		checkStream(t, "refused run", evs, 0, true)
		if len(evs) == 0 || evs[len(evs)-1].Type != "RUN_ERROR" {
			t.Errorf("the refused run's stream does not end with RUN_ERROR: %s", describe(evs))
		}
		p.barrier("probe")
		if n := bk.offered(f.RunID); n != 1 {
			t.Errorf("the refused run was offered %d times, want once", n)
		}
		if r2 := c.run(f.RunID); r2.Status != "failed" {
			t.Errorf("the refused run moved on to %s", r2.Status)
		}
		t.Logf("refused %v after the offer: %s/%q", refusedIn.Round(time.Millisecond), r.Status, r.Reason)
	})

	// (b) Answered only once the record says offering: the write happened
	// no sooner than FUNDUQ_OFFERING_WRITE_AFTER, and the accept claims it.
	t.Run("accept after offering", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[1], sg.PublicKeyHex(), "probe", "hi")
		f, at := p.offerAt(bound)
		c.waitStatus(f.RunID, offerAfter+margin, "offering", func(r runRow) bool { return r.Status == "offering" })
		seen := time.Since(at)
		if seen < offerAfter-quickSlack {
			t.Errorf("the record said offering %v after the offer arrived, before FUNDUQ_OFFERING_WRITE_AFTER (%v)", seen.Round(time.Millisecond), offerAfter)
		}
		p.accept(f.RunID)
		p.answerRun(f)
		c.checkAnswered(t, st, f.RunID, bound, bk)
		if from := c.claimedFrom(f.RunID); from != "offering" {
			t.Errorf("claimed from %q after the record said offering, want offering", from)
		}
		t.Logf("the record said offering %v after the offer arrived (write after %v); accepted then", seen.Round(time.Millisecond), offerAfter)
	})

	// (b) Declined once the record says offering: back to queued (written),
	// offered again when something changes, run once.
	t.Run("decline after offering", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", "hi")
		f, _ := p.offerAt(bound)
		c.waitStatus(f.RunID, offerAfter+margin, "offering", func(r runRow) bool { return r.Status == "offering" })
		p.decline(f.RunID)
		c.waitStatus(f.RunID, margin, "queued again after the decline", func(r runRow) bool { return r.Status == "queued" })
		p.register("probe")
		f2, _ := p.offerAt(bound)
		if f2.RunID != f.RunID {
			t.Fatalf("offered %s, want %s again", f2.RunID, f.RunID)
		}
		p.accept(f2.RunID)
		p.answerRun(f2)
		c.checkAnswered(t, st, f.RunID, bound, bk)
	})

	// (c) Never answered: offering once due, queued again when the offer
	// lapses; (e) a late accept then (twice) claims it once.
	t.Run("no answer then late accepts", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[1], sg.PublicKeyHex(), "probe", "hi")
		f, at := p.offerAt(bound)
		c.waitStatus(f.RunID, offerAfter+margin, "offering", func(r runRow) bool { return r.Status == "offering" })
		c.waitStatus(f.RunID, offerDeliver+margin, "queued after the offer lapsed", func(r runRow) bool { return r.Status == "queued" })
		lapsed := time.Since(at)
		if lapsed < offerDeliver-quickSlack {
			t.Errorf("the offer was taken back %v after it arrived, before FUNDUQ_DELIVER_TIMEOUT (%v)", lapsed.Round(time.Millisecond), offerDeliver)
		}
		p.accept(f.RunID)
		p.accept(f.RunID) // a duplicate
		c.waitStatus(f.RunID, margin, "claimed by the late accept", func(r runRow) bool { return r.Status == "running" })
		p.answerRun(f)
		c.checkAnswered(t, st, f.RunID, bound, bk)
		p.barrier("probe")
		if n := bk.offered(f.RunID); n != 1 {
			t.Errorf("run offered %d times, want once (the late accept claimed it)", n)
		}
		t.Logf("lapsed %v after the offer (deliver timeout %v); the late accept claimed it", lapsed.Round(time.Millisecond), offerDeliver)
	})

	// (e) A decline then an accept (and its duplicate) before the write:
	// the accept of a run nobody holds, from the key serving it, claims it
	// (D15); it runs once and is offered no more.
	t.Run("decline then duplicate accepts at once", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", "hi")
		f, at := p.offerAt(bound)
		p.decline(f.RunID)
		p.accept(f.RunID)
		p.accept(f.RunID)
		answeredIn := time.Since(at)
		c.waitStatus(f.RunID, margin, "claimed", func(r runRow) bool { return r.Status == "running" })
		p.answerRun(f)
		c.checkAnswered(t, st, f.RunID, bound, bk)
		p.barrier("probe")
		if n := bk.offered(f.RunID); n != 1 {
			t.Errorf("run offered %d times, want once", n)
		}
		t.Logf("decline + 2 accepts %v after the offer; claimed from %q", answeredIn.Round(time.Millisecond), c.claimedFrom(f.RunID))
	})

	// (d) The link goes with the offer unwritten — cut without a close
	// frame, or closed with one: the run waits queued, is offered to the
	// key's next link, and runs once.
	for _, how := range []string{"cut", "close frame"} {
		t.Run("disconnect before the write/"+how, func(t *testing.T) {
			c := sub(t)
			p, sg, bk := provider(t)
			st := c.start(c.doors[1], sg.PublicKeyHex(), "probe", "hi")
			f, at := p.offerAt(bound)
			if how == "cut" {
				p.cut()
			} else {
				p.leave()
			}
			goneIn := time.Since(at)
			p2 := c.connectProvider(sg, bk, l.url, l.url)
			p2.register("probe")
			f2, _ := p2.offerAt(bound)
			if f2.RunID != f.RunID {
				t.Fatalf("the next link was offered %s, want %s", f2.RunID, f.RunID)
			}
			p2.accept(f2.RunID)
			p2.answerRun(f2)
			c.checkAnswered(t, st, f.RunID, bound+margin, bk)
			t.Logf("link gone (%s) %v after the offer; offered to the next link; offering written: %v", how, goneIn.Round(time.Millisecond), c.wroteOffering(f.RunID))
		})
	}

	// (d)+(e) An accept and the link cut right behind it, before the
	// write: the key's next link reports the run as its own and it runs
	// once, wherever the accept landed.
	t.Run("accept then cut", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", "hi")
		f, _ := p.offerAt(bound)
		p.accept(f.RunID)
		p.cut()
		p2 := c.connectProvider(sg, bk, l.url, l.url)
		p2.adopt(f.RunID)
		p2.register("probe")
		p2.accept(f.RunID) // the provider holds it: it says so on its new link
		p2.answerRun(f)
		c.checkAnswered(t, st, f.RunID, bound+margin, bk)
	})

	// A caller's cancel while the offer is out unwritten waits for the
	// answer: a decline then ends the run cancelled, never offered again;
	// an accept claims it, the provider is sent a cancel, and its finish
	// ends the run cancelled.
	for _, verdict := range []string{"decline", "accept"} {
		t.Run("cancel before the write/"+verdict, func(t *testing.T) {
			c := sub(t)
			p, sg, bk := provider(t)
			st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", "cancel me")
			f, at := p.offerAt(bound)
			body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":%q}}`, f.RunID)
			resp, err := quickLong.Post(c.doors[1].url+"/a2a/"+sg.PublicKeyHex()+"/probe", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("tasks/cancel: %d", resp.StatusCode)
			}
			r, _ := c.waitStatus(f.RunID, margin, "cancel requested", func(r runRow) bool { return r.CancelRequested })
			asked, askedIn := r.Status, time.Since(at)
			if r.Status != "queued" && r.Status != "offering" {
				t.Errorf("cancel requested %v after the offer, the answer still out: the record says %s, want queued or offering",
					time.Since(at).Round(time.Millisecond), r.Status)
			}
			if verdict == "decline" {
				p.decline(f.RunID)
			} else {
				p.accept(f.RunID)
				p.event(f.RunID, 1, startedEv(*f.ThreadID, f.RunID))
				if _, ok := p.next(wire.TypeCancel, bound); !ok {
					t.Fatalf("the provider that accepted a run cancelled meanwhile was sent no cancel within %v", bound)
				}
				p.finish(f.RunID)
			}
			r, _ = c.waitTerminal(f.RunID, bound)
			if r.Status != "cancelled" {
				t.Errorf("run ended %s/%s, want cancelled", r.Status, r.Reason)
			}
			// A run cancelled from queued stores no event, and the funnel
			// synthesizes no terminal event for a cancelled one (design.md:
			// only a failed run gets RUN_ERROR): the caller's stream closes,
			// without a gap.
			evs := st.waitClosed(t, afterFailover)
			checkStream(t, "cancelled run", evs, 0, false)
			if verdict == "accept" && (len(evs) == 0 || evs[len(evs)-1].Type != "RUN_STARTED") {
				t.Errorf("the caller of the claimed, cancelled run saw %s, want the provider's RUN_STARTED", describe(evs))
			}
			if n := len(c.events(f.RunID)); n != c.run(f.RunID).LastSeq {
				t.Errorf("%d events stored, last_seq %d", n, c.run(f.RunID).LastSeq)
			}
			p.barrier("probe")
			if n := bk.offered(f.RunID); n != 1 {
				t.Errorf("run offered %d times, want once", n)
			}
			t.Logf("cancel requested %v after the offer (record %s then); %s; ended %s", askedIn.Round(time.Millisecond), asked, verdict, r.Status)
		})
	}

	// Two callers at once on two threads, and a stranger (another key
	// serving an agent of the same name) answering and reporting for both
	// runs while their offers are out: one run accepted at once, the other
	// once its record says offering. The stranger changes nothing and is
	// offered nothing; each caller sees only its own run.
	t.Run("two callers and a stranger", func(t *testing.T) {
		c := sub(t)
		p, sg, bk := provider(t)
		stranger, _, sbk := provider(t)
		begin := make(chan struct{})
		got := make(chan *stream, 2)
		for i := range 2 {
			go func() {
				<-begin
				body := fmt.Sprintf(`{"threadId":%q,"runId":"r","messages":[{"id":"u1","role":"user","content":"caller %d"}]}`, newThreadID(), i)
				got <- c.openStream(http.MethodPost, c.doors[i].url+"/agui/"+sg.PublicKeyHex()+"/probe", body, -1)
			}()
		}
		close(begin)
		streams := map[string]*stream{}
		for range 2 {
			s := <-got
			streams[s.waitRunID(t, margin+offerDeliver)] = s
		}
		fa, atA := p.offerAt(bound)
		fb, _ := p.offerAt(bound)
		if streams[fa.RunID] == nil || streams[fb.RunID] == nil || fa.RunID == fb.RunID {
			t.Fatalf("offered %s and %s, want the two callers' runs %v", fa.RunID, fb.RunID, streams)
		}
		for _, f := range []wire.RunFrame{fa, fb} {
			stranger.accept(f.RunID)
			stranger.decline(f.RunID)
			stranger.event(f.RunID, 1, deltaEv("x", "INTRUDER"))
			stranger.finish(f.RunID)
		}
		// D15: every report not taken is answered; the stranger's acks
		// meet an offer out to another key.
		for i := range 4 {
			if _, ok := stranger.next(wire.TypeError, margin); !ok {
				t.Errorf("the stranger's report %d was not answered with an error frame within %v", i+1, margin)
				break
			}
		}
		p.accept(fa.RunID)
		acceptedA := time.Since(atA)
		p.answerRun(fa)
		c.waitStatus(fb.RunID, offerAfter+margin, "offering", func(r runRow) bool { return r.Status == "offering" })
		p.accept(fb.RunID)
		p.answerRun(fb)
		for id, s := range streams {
			r := c.checkAnswered(t, s, id, bound, bk)
			if r.Provider != sg.PublicKeyHex() {
				t.Errorf("run %s recorded for provider %s", id, r.Provider)
			}
			for _, e := range s.snapshot() {
				if strings.Contains(e.Data, "INTRUDER") {
					t.Errorf("run %s: the caller saw the stranger's event %s", id, e.Data)
				}
			}
			for _, e := range c.events(id) {
				if strings.Contains(e.Raw, "INTRUDER") {
					t.Errorf("run %s: the stranger's event was stored: %s", id, e.Raw)
				}
			}
			if n := bk.offered(id); n != 1 {
				t.Errorf("run %s offered %d times, want once", id, n)
			}
		}
		stranger.barrier("probe")
		sbk.mu.Lock()
		if len(sbk.offers) != 0 || stranger.has(wire.TypeRun) {
			t.Errorf("the stranger was offered runs: %v", sbk.offers)
		}
		sbk.mu.Unlock()
		t.Logf("run A accepted %v after its offer (claimed from %q), run B after offering (claimed from %q)",
			acceptedA.Round(time.Millisecond), c.claimedFrom(fa.RunID), c.claimedFrom(fb.RunID))
	})
}

// ---------------------------------------------------------------- PostgreSQL goes away

// TestOfferingWritePostgresGoesAway: the broker's PostgreSQL connections
// are terminated at the moment the offering write falls due. First
// exactly at it — the run's row is locked so the due write is seen
// blocked on it, then the broker's backends are terminated and the lock
// let go — with the accept arriving behind the blocked write, or only
// once the record says offering; then at seeded random moments around the
// write, with seeded answers. Every run is delivered once and completes;
// none stays queued.
func TestOfferingWritePostgresGoesAway(t *testing.T) {
	c := newOfferingCluster(t, 1, 1)
	l := c.waitLeader(boot)
	bk := newBook()
	sg := newSigner(t, 0x70)
	p := c.connectProvider(sg, bk, l.url, l.url)
	p.register("probe")
	bound := offerDeliver + margin
	epoch := c.epoch()

	for _, answer := range []string{"accept behind the blocked write", "accept once offering", "accept at once, the claim blocked"} {
		t.Run("at the write/"+answer, func(t *testing.T) {
			cc := *c
			cc.t = t
			c := &cc
			lock, err := pgx.Connect(context.Background(), c.dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close(context.Background())
			st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", answer)
			f, at := p.offerAt(bound)
			tx, err := lock.Begin(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			var status string
			if err := tx.QueryRow(context.Background(), `SELECT status FROM runs WHERE run_id = $1 FOR UPDATE`, f.RunID).Scan(&status); err != nil {
				t.Fatal(err)
			}
			if status != "queued" {
				t.Skipf("the row was locked %v after the offer, when it already said %s: the write could not be caught (machine too slow)", time.Since(at).Round(time.Millisecond), status)
			}
			var me int32
			if err := tx.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&me); err != nil {
				t.Fatal(err)
			}
			if answer == "accept at once, the claim blocked" {
				p.accept(f.RunID) // before the write is due: the claim from queued meets the lock
			}
			// The barrier: a broker backend waits for this lock — the due
			// offering write.
			var blocked int32
			var query string
			ok, in := until(offerAfter+margin, func() bool {
				err := c.db.QueryRow(context.Background(), `SELECT pid, query FROM pg_stat_activity
					WHERE $1::int = ANY(pg_blocking_pids(pid)) LIMIT 1`, me).Scan(&blocked, &query)
				return err == nil
			})
			if !ok {
				t.Fatalf("no broker write blocked on the run's row within %v of the lock", offerAfter+margin)
			}
			if answer == "accept at once, the claim blocked" && time.Since(at)-in > quick {
				t.Skipf("the accept reached the row %v after the offer, not before the write: machine too slow", time.Since(at)-in)
			}
			t.Logf("the due write seen blocked on the row %v after the offer arrived (%v after the lock): %s",
				time.Since(at).Round(time.Millisecond), in.Round(time.Millisecond), oneLine(query))
			broker := c.backendsOf(l)
			mine := false
			for _, b := range broker {
				mine = mine || b == blocked
			}
			if !mine {
				t.Fatalf("the blocked backend %d is not the broker's (its backends: %v)", blocked, broker)
			}
			if answer == "accept behind the blocked write" {
				p.accept(f.RunID)
			}
			killed := c.terminate(broker)
			if err := tx.Rollback(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Logf("terminated %d broker backend(s), the blocked write's among them; the row let go", killed)
			if answer == "accept once offering" {
				c.waitStatus(f.RunID, margin, "offering (the write retried)", func(r runRow) bool { return r.Status == "offering" })
				p.accept(f.RunID)
			}
			p.answerRun(f)
			r := c.checkAnswered(t, st, f.RunID, bound+margin, bk)
			if r.Epoch != epoch || c.leader() != l {
				t.Errorf("run completed under epoch %d with leader %v; want the same leader, epoch %d", r.Epoch, c.leader(), epoch)
			}
			if n := bk.offered(f.RunID); n != 1 {
				t.Errorf("run offered %d times, want once", n)
			}
			t.Logf("completed; claimed from %q", c.claimedFrom(f.RunID))
		})
	}

	t.Run("seeded moments", func(t *testing.T) {
		cc := *c
		cc.t = t
		c := &cc
		rng := seeded(t)
		for i := range 6 {
			killAt := time.Duration(rng.Int64N(int64(2 * offerAfter)))
			answerAt := time.Duration(rng.Int64N(int64(2 * offerAfter)))
			decline := rng.IntN(3) == 0
			verdict := "accept"
			if decline {
				verdict = "decline"
			}
			// A key of its own: its declines are not counted against
			// the next iteration's provider (D6).
			sg := newSigner(t, byte(0x71+i))
			p := c.connectProvider(sg, bk, l.url, l.url)
			p.register("probe")
			st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", fmt.Sprint("seeded ", i))
			f, at := p.offerAt(bound)
			type step struct {
				at time.Duration
				do func()
			}
			steps := []step{{killAt, func() { c.terminate(c.backendsOf(l)) }}, {answerAt, func() {
				if decline {
					p.decline(f.RunID)
				} else {
					p.accept(f.RunID)
				}
			}}}
			if steps[1].at < steps[0].at {
				steps[0], steps[1] = steps[1], steps[0]
			}
			for _, s := range steps {
				time.Sleep(time.Until(at.Add(s.at)))
				s.do()
			}
			t.Logf("run %d (%s): broker backends terminated %v after the offer, %s %v after it (write due after %v)",
				i, f.RunID, killAt.Round(time.Millisecond), verdict, answerAt.Round(time.Millisecond), offerAfter)
			if decline {
				p.register("probe")
				f2, _ := p.offerAt(bound + margin)
				if f2.RunID != f.RunID {
					t.Fatalf("offered %s after the decline, want %s again", f2.RunID, f.RunID)
				}
				p.accept(f.RunID)
			}
			p.answerRun(f)
			c.checkAnswered(t, st, f.RunID, bound+margin, bk)
			want := 1
			if decline {
				want = 2
			}
			if n := bk.offered(f.RunID); n != want {
				t.Errorf("run %d offered %d times, want %d", i, n, want)
			}
			if t.Failed() {
				break
			}
		}
		if c.leader() != l || c.epoch() != epoch {
			t.Errorf("leadership moved: leader %v epoch %d, want %s under %d", c.leader(), c.epoch(), l.name, epoch)
		}
	})
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ---------------------------------------------------------------- the leader goes with the offer unwritten

// TestOfferingUnwrittenAcrossFailover: the leader goes — SIGKILL, a
// planned handover (SIGTERM), or frozen (SIGSTOP) past the lease, to wake
// deposed with the offer's due write and the provider's answer waiting —
// while an offer is out and its offering write not yet due; with no
// answer yet, or an accept sent just before.
// The new leader offers the run again (or has its provider re-adopt it),
// it is delivered and run once, completes under the new epoch, and its
// caller's stream ends with its answer. The moments are seeded.
func TestOfferingUnwrittenAcrossFailover(t *testing.T) {
	for _, how := range []string{"SIGKILL", "SIGTERM", "SIGSTOP"} {
		t.Run(how, func(t *testing.T) {
			c := newOfferingCluster(t, 2, 2)
			c.waitLeader(boot)
			rng := seeded(t)
			n := 3
			for _, acceptFirst := range []bool{false, true} {
				name := "no answer"
				if acceptFirst {
					name = "accept in flight"
				}
				key := byte(0x80 + n)
				t.Run(name, func(t *testing.T) {
					cc := *c
					cc.t = t
					failoverUnwritten(t, &cc, how, key, acceptFirst, rng)
				})
				n++
				c.startBroker(fmt.Sprintf("n%d", n)) // the next standby
			}
		})
	}
}

func failoverUnwritten(t *testing.T, c *cluster, how string, key byte, acceptFirst bool, rng *rand.Rand) {
	l := c.waitLeader(leaseTTL + margin)
	bk := newBook()
	sg := newSigner(t, key)
	p := c.connectProvider(sg, bk, l.url, l.url)
	p.register("probe")
	oldEpoch := c.epoch()
	faultAt := time.Duration(rng.Int64N(int64(quick / 2)))
	st := c.start(c.doors[1], sg.PublicKeyHex(), "probe", "across "+how)
	f, at := p.offerAt(offerDeliver + margin)
	if acceptFirst {
		time.Sleep(time.Until(at.Add(time.Duration(rng.Int64N(int64(faultAt + 1))))))
		p.accept(f.RunID)
	}
	time.Sleep(time.Until(at.Add(faultAt)))
	switch how {
	case "SIGKILL":
		l.signal(syscall.SIGKILL)
	case "SIGTERM":
		l.signal(syscall.SIGTERM)
	case "SIGSTOP":
		l.freeze()
	}
	faulted := time.Since(at)
	if faulted >= quick {
		if how == "SIGSTOP" {
			l.thaw()
		}
		t.Skipf("%s reached the leader %v after the offer, not before the write (%v): machine too slow", how, faulted.Round(time.Millisecond), offerAfter)
	}
	if how == "SIGSTOP" {
		frozenUnwritten(t, c, l, p, sg, bk, st, f, acceptFirst, oldEpoch, faulted)
		return
	}
	l.wait(t, boot)
	if how == "SIGTERM" && l.ExitCode() != 0 {
		t.Errorf("the handing-over leader exited %d", l.ExitCode())
	}
	r := c.run(f.RunID)
	t.Logf("%s %v after the offer arrived (accept sent first: %v); the record reads %s under epoch %d; offering written: %v",
		how, faulted.Round(time.Millisecond), acceptFirst, r.Status, r.Epoch, c.wroteOffering(f.RunID))
	if r.Status == "offering" {
		t.Errorf("the leader went %v after the offer, before FUNDUQ_OFFERING_WRITE_AFTER (%v), and the record says offering", faulted.Round(time.Millisecond), offerAfter)
	}
	if !acceptFirst && r.Status != "queued" {
		t.Errorf("unanswered offer, leader gone: the record says %s, want queued", r.Status)
	}
	s := c.waitLeader(leaseTTL+margin, l)
	newEpoch := c.epoch()
	if !p.waitClosed(margin) {
		t.Errorf("the provider's link to the gone leader is still open after %v", margin)
	}
	p2 := c.connectProvider(sg, bk, s.url, s.url)
	if acceptFirst {
		p2.adopt(f.RunID)
	}
	p2.register("probe")
	if acceptFirst {
		// It holds the run: it says so on its new link (D15/D7), whether
		// the accept landed before the leader went or not, and accepts
		// the run again should the new leader offer it.
		p2.accept(f.RunID)
		p2.claimedAgain(c, f.RunID, newEpoch, offerDeliver+margin)
	} else {
		f2, _ := p2.offerAt(offerDeliver + margin)
		if f2.RunID != f.RunID {
			t.Fatalf("the new leader offered %s, want %s again", f2.RunID, f.RunID)
		}
		p2.accept(f2.RunID)
	}
	p2.answerRun(f)
	r2 := c.checkAnswered(t, st, f.RunID, offerDeliver+afterFailover, bk)
	if r2.Epoch != newEpoch || newEpoch <= oldEpoch {
		t.Errorf("run completed under epoch %d; the new leader %s holds %d (was %d)", r2.Epoch, s.name, newEpoch, oldEpoch)
	}
	t.Logf("%s led under epoch %d; the run was offered %d time(s) in all, its handler started %d time(s)", s.name, newEpoch, bk.offered(f.RunID), bk.startsOf(f.RunID))
}

// frozenUnwritten goes on from a leader frozen with an offer out and its
// offering write not yet due. The provider (its link to the frozen node
// silent) opens a link to the new leader, which offers the run again (or
// has it re-adopted) and sees it claimed and running. Without an accept
// sent first, the provider also accepts on its old link, to the frozen
// node. Then the old leader wakes: its due write and that accept wait for
// it. Deposed, it must change nothing — no status, no cancel sent for the
// run to either link — and close its links; the run completes once under
// the new epoch.
func frozenUnwritten(t *testing.T, c *cluster, l *proc, p *wprov, sg *identity.Signer, bk *book, st *stream, f wire.RunFrame, acceptFirst bool, oldEpoch int64, faulted time.Duration) {
	thawed := false
	defer func() {
		if !thawed {
			l.thaw()
		}
	}()
	if !acceptFirst {
		p.accept(f.RunID) // to the frozen leader: read, if ever, once it wakes deposed
	}
	s := c.waitLeader(leaseTTL+margin, l)
	newEpoch := c.epoch()
	r := c.run(f.RunID)
	t.Logf("%s frozen %v after the offer (accept sent first: %v); %s leads under epoch %d; the record reads %s under epoch %d",
		l.name, faulted.Round(time.Millisecond), acceptFirst, s.name, newEpoch, r.Status, r.Epoch)
	if r.Status == "offering" {
		t.Errorf("frozen %v after the offer, before FUNDUQ_OFFERING_WRITE_AFTER (%v), yet the record says offering", faulted.Round(time.Millisecond), offerAfter)
	}
	p2 := c.connectProvider(sg, bk, s.url, s.url)
	p2.adopt(f.RunID) // the provider answered accept on its old link either way
	p2.register("probe")
	if acceptFirst && r.Status == "running" {
		p2.accept(f.RunID) // it holds the run: it says so on its new link
		p2.claimedAgain(c, f.RunID, newEpoch, offerDeliver+margin)
	} else {
		f2, _ := p2.offerAt(offerDeliver + margin)
		if f2.RunID != f.RunID {
			t.Fatalf("the new leader offered %s, want %s again", f2.RunID, f.RunID)
		}
		p2.accept(f2.RunID)
	}
	p2.event(f.RunID, 1, startedEv(*f.ThreadID, f.RunID))
	c.waitStatus(f.RunID, margin, "running under the new epoch", func(r runRow) bool {
		return r.Status == "running" && r.Epoch == newEpoch && r.LastSeq >= 1
	})
	l.thaw()
	thawed = true
	woke := time.Now()
	if !p.waitClosed(leaseTTL + margin) {
		t.Errorf("the deposed leader did not close the provider's old link within %v of waking", leaseTTL+margin)
	}
	// The old link is closed: everything the deposed node sent on it has
	// been read.
	if p.has(wire.TypeCancel) {
		t.Errorf("the deposed leader sent the provider a cancel for the run the new leader delivered")
	}
	if ok, _ := until(margin, func() bool { r, err := c.readyz(l); return err == nil && r.Role == "standby" }); !ok {
		t.Errorf("%s does not report itself standby within %v of waking", l.name, margin)
	}
	if r := c.run(f.RunID); r.Status != "running" || r.Epoch != newEpoch {
		t.Errorf("after the deposed leader woke the run reads %s under epoch %d, want running under %d", r.Status, r.Epoch, newEpoch)
	}
	p2.complete(f.RunID, *f.ThreadID, 2)
	r2 := c.checkAnswered(t, st, f.RunID, offerDeliver+afterFailover, bk)
	if r2.Epoch != newEpoch || newEpoch <= oldEpoch {
		t.Errorf("run completed under epoch %d; the new leader %s holds %d (was %d)", r2.Epoch, s.name, newEpoch, oldEpoch)
	}
	p2.barrier("probe")
	if p2.has(wire.TypeCancel) {
		t.Errorf("the provider's new link was sent a cancel for the run it completed")
	}
	t.Logf("%s woke deposed and closed the old link %v later; the run was offered %d time(s), its handler started %d time(s)",
		l.name, time.Since(woke).Round(time.Millisecond), bk.offered(f.RunID), bk.startsOf(f.RunID))
}

// ---------------------------------------------------------------- around the default write

// TestOfferingAroundTheDefaultWrite: the product's own setting (the write
// after 50ms, the harness's deliver timeout). Six raw providers take 24
// runs started at once from both doors, each answering its first offer of
// a run at a seeded moment in [0, 120ms) — straddling the write — with a
// seeded verdict: accept, decline, or no answer (the offer lapses). A
// declined or lapsed run is offered again when its provider re-registers
// (a nudger does so while runs wait), and is then accepted at once. Every
// run completes once; its caller's stream ends with its answer.
func TestOfferingAroundTheDefaultWrite(t *testing.T) {
	c := newCluster(t, 1, 2)
	l := c.waitLeader(boot)
	rng := seeded(t)
	const nprov, perProv = 6, 4
	bk := newBook()
	type script struct {
		verdict string
		after   time.Duration
	}
	scripts := map[string]script{} // by run id, fixed once its first offer arrives
	var provs []*wprov
	var signers []*identity.Signer
	plans := make([][]script, nprov)
	for i := range nprov {
		sg := newSigner(t, byte(0xc0+i))
		p := c.connectProvider(sg, bk, l.url, l.url)
		p.register("probe")
		provs, signers = append(provs, p), append(signers, sg)
		// At most two declines and two lapses per key: three would
		// withdraw it (D6, provider_quality_tolerance).
		declines, lapses := 0, 0
		for range perProv {
			v := "accept"
			switch x := rng.IntN(10); {
			case x < 2 && declines < 2:
				v, declines = "decline", declines+1
			case x == 2 && lapses < 2:
				v, lapses = "none", lapses+1
			}
			plans[i] = append(plans[i], script{v, time.Duration(rng.Int64N(int64(120 * time.Millisecond)))})
		}
	}
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	for i, p := range provs {
		wg.Go(func() {
			next := 0
			for {
				select {
				case <-stop:
					return
				default:
				}
				f, ok := p.next(wire.TypeRun, 100*time.Millisecond)
				if !ok {
					continue
				}
				var rf wire.RunFrame
				_ = json.Unmarshal(f.raw, &rf)
				mu.Lock()
				sc, seen := scripts[rf.RunID]
				if !seen && next < len(plans[i]) {
					sc = plans[i][next]
					next++
					scripts[rf.RunID] = sc
				}
				mu.Unlock()
				if seen || sc.verdict == "" {
					sc = script{verdict: "accept"} // offered again: taken at once
				}
				thread := *rf.ThreadID
				time.AfterFunc(time.Until(f.at.Add(sc.after)), func() {
					switch sc.verdict {
					case "accept":
						p.accept(rf.RunID)
						p.event(rf.RunID, 1, startedEv(thread, rf.RunID))
						p.complete(rf.RunID, thread, 2)
					case "decline":
						p.decline(rf.RunID)
					}
				})
			}
		})
	}
	begin := make(chan struct{})
	got := make(chan *stream, nprov*perProv)
	for i := range nprov * perProv {
		go func() {
			<-begin
			body := fmt.Sprintf(`{"threadId":%q,"runId":"r","messages":[{"id":"u1","role":"user","content":"run %d"}]}`, newThreadID(), i)
			got <- c.openStream(http.MethodPost, c.doors[i%2].url+"/agui/"+signers[i%nprov].PublicKeyHex()+"/probe", body, -1)
		}()
	}
	close(begin)
	streams := map[string]*stream{}
	for range nprov * perProv {
		s := <-got
		streams[s.waitRunID(t, margin+deliverTimeout)] = s
	}
	// The nudger: a re-register has the key's waiting lanes tried again.
	wg.Go(func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, p := range provs {
				p.send(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "probe"}}})
			}
		}
	})
	bound := 2*deliverTimeout + 2*margin
	froms := map[string]int{}
	for id, st := range streams {
		c.checkAnswered(t, st, id, bound, bk)
		mu.Lock()
		sc := scripts[id]
		mu.Unlock()
		side := "after"
		if sc.after < 50*time.Millisecond {
			side = "before"
		}
		froms[fmt.Sprintf("%s %s 50ms, claimed from %s", sc.verdict, side, c.claimedFrom(id))]++
	}
	t.Logf("%d runs, all completed once; first answers and claims: %v", len(streams), froms)
}

// TestOfferingLeaderDiesInTheDueWrite: the leader is SIGKILLed while its
// due offering write is in PostgreSQL — held on the run's row, which the
// test locks, so the write is seen blocked before the kill; the row is let
// go once the leader is dead. Whatever that orphaned statement does (it
// may still commit offering under the dead leader's epoch), the next
// leader offers the run again, it runs once and completes under the new
// epoch, and its caller's stream ends with its answer.
func TestOfferingLeaderDiesInTheDueWrite(t *testing.T) {
	c := newOfferingCluster(t, 2, 2)
	l := c.waitLeader(boot)
	bk := newBook()
	sg := newSigner(t, 0x90)
	p := c.connectProvider(sg, bk, l.url, l.url)
	p.register("probe")
	oldEpoch := c.epoch()
	st := c.start(c.doors[1], sg.PublicKeyHex(), "probe", "die in the write")
	f, at := p.offerAt(offerDeliver + margin)
	lock, err := pgx.Connect(context.Background(), c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(context.Background())
	tx, err := lock.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var status string
	var me int32
	if err := tx.QueryRow(context.Background(), `SELECT status, pg_backend_pid() FROM runs WHERE run_id = $1 FOR UPDATE`, f.RunID).Scan(&status, &me); err != nil {
		t.Fatal(err)
	}
	if status != "queued" {
		t.Skipf("the row was locked %v after the offer, already %s: the write could not be caught (machine too slow)", time.Since(at).Round(time.Millisecond), status)
	}
	var blocked int32
	if ok, _ := until(offerAfter+margin, func() bool {
		return c.db.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid)) LIMIT 1`, me).Scan(&blocked) == nil
	}); !ok {
		t.Fatalf("no broker write blocked on the run's row within %v", offerAfter+margin)
	}
	mine := false
	for _, b := range c.backendsOf(l) {
		mine = mine || b == blocked
	}
	if !mine {
		t.Fatalf("the blocked backend %d is not %s's", blocked, l.name)
	}
	l.kill(t)
	killed := time.Since(at)
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := c.waitLeader(leaseTTL+margin, l)
	newEpoch := c.epoch()
	r := c.run(f.RunID)
	t.Logf("%s SIGKILLed %v after the offer with its due write blocked (backend %d); the row let go; %s leads under epoch %d; the record reads %s under epoch %d",
		l.name, killed.Round(time.Millisecond), blocked, s.name, newEpoch, r.Status, r.Epoch)
	if !p.waitClosed(margin) {
		t.Errorf("the provider's link to the dead leader is still open after %v", margin)
	}
	p2 := c.connectProvider(sg, bk, s.url, s.url)
	p2.register("probe")
	f2, _ := p2.offerAt(offerDeliver + margin)
	if f2.RunID != f.RunID {
		t.Fatalf("the new leader offered %s, want %s again", f2.RunID, f.RunID)
	}
	p2.accept(f2.RunID)
	p2.answerRun(f2)
	r2 := c.checkAnswered(t, st, f.RunID, offerDeliver+afterFailover, bk)
	if r2.Epoch != newEpoch || newEpoch <= oldEpoch {
		t.Errorf("run completed under epoch %d; the new leader holds %d (was %d)", r2.Epoch, newEpoch, oldEpoch)
	}
	if n := bk.offered(f.RunID); n != 2 {
		t.Errorf("run offered %d times, want twice (the dead leader's offer and the new leader's)", n)
	}
}

// TestOfferingWriteAtOnceWhenZero: FUNDUQ_OFFERING_WRITE_AFTER=0 writes
// offering with the frame, as before the deferred write: an accept sent
// the moment the offer arrives is claimed from offering, and an offer
// left unanswered reads offering at once and queued after its lapse.
func TestOfferingWriteAtOnceWhenZero(t *testing.T) {
	clusterEnv = []string{"FUNDUQ_OFFERING_WRITE_AFTER=0"}
	c := func() *cluster { defer func() { clusterEnv = nil }(); return newCluster(t, 1, 1) }()
	l := c.waitLeader(boot)
	bk := newBook()
	sg := newSigner(t, 0x99)
	p := c.connectProvider(sg, bk, l.url, l.url)
	p.register("probe")

	st := c.start(c.doors[0], sg.PublicKeyHex(), "probe", "quick")
	f, at := p.offerAt(deliverTimeout + margin)
	p.accept(f.RunID)
	answeredIn := time.Since(at)
	p.answerRun(f)
	c.checkAnswered(t, st, f.RunID, deliverTimeout+margin, bk)
	if from := c.claimedFrom(f.RunID); from != "offering" || !c.wroteOffering(f.RunID) {
		t.Errorf("an accept %v after the offer, write at once: claimed from %q, offering written %v; want from offering, written",
			answeredIn.Round(time.Millisecond), from, c.wroteOffering(f.RunID))
	}

	st = c.start(c.doors[0], sg.PublicKeyHex(), "probe", "slow")
	f, at = p.offerAt(deliverTimeout + margin)
	c.waitStatus(f.RunID, margin, "offering", func(r runRow) bool { return r.Status == "offering" })
	seen := time.Since(at)
	c.waitStatus(f.RunID, deliverTimeout+margin, "queued after the lapse", func(r runRow) bool { return r.Status == "queued" })
	t.Logf("unanswered: offering seen %v after the offer arrived; queued again %v after it",
		seen.Round(time.Millisecond), time.Since(at).Round(time.Millisecond))
	p.accept(f.RunID) // late: claims it (D15)
	p.answerRun(f)
	c.checkAnswered(t, st, f.RunID, deliverTimeout+margin, bk)
}
