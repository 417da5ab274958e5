package agui_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// stepClock is a door clock a test moves forward.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *stepClock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// A presenting caller's first turn sent again unchanged — the same body,
// the same headers, as an HTTP client's own retry does — once its
// Funduq-Presenter proof has left the ±60 s window. The stale proof is no
// authority, but the presenter made this request before (its
// Idempotency-Key, or without one its threadId and runId — on a thread
// its runId — is in that presenter's scope): the retry is refused 401 presenter_proof_stale and
// writes nothing, where it used to open a second thread and run the turn
// again (D13). Re-signed, the retry streams the first run.
// docs/design.md §The doors, "A retry whose presenter proof went stale".
func TestOutsideRetryWhosePresenterProofWentStale(t *testing.T) {
	for _, c := range []struct {
		name, key string
		onThread  bool
	}{
		{"Idempotency-Key", "k-1", false},
		{"runId, no key", "", false},
		{"runId on a thread, no key", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			clock := &stepClock{now: time.Now()}
			srv := startDoor(t, h, func(o *agui.Options) { o.Now = clock.Now })
			url := aguiURL(srv, p.Key, "echo")
			thread := "new"
			if c.onThread {
				thread = doneThread(t, h, p, url)
			}
			body := input(thread, "r-1", "")
			me := signer(t, 0xc1)
			hdr := func() map[string]string {
				m := map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(me, clock.Now().Unix(), []byte(body))}
				if c.key != "" {
					m[agui.IdempotencyHeader] = c.key
				}
				return m
			}
			sent := hdr()
			s := openStream(t, "POST", url, body, sent)
			f := p.Offer()
			p.Accept(f.RunID)
			p.Complete(f.RunID, *f.ThreadID)
			s.rest()
			runs, threads := runCount(t, h), threadCount(t, h)

			clock.add(2 * time.Minute)
			code, _, got := jsonCall(t, "POST", url, body, sent)
			if code != 401 || errCode(got) != door.CodePresenterProofStale {
				t.Errorf("the retry, its presenter proof stale: %d %v; want 401 %s", code, got, door.CodePresenterProofStale)
			}
			if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
				t.Fatalf("the retry, its presenter proof stale, wrote runs %d→%d threads %d→%d; want nothing written",
					runs, r, threads, th)
			}

			s = openStream(t, "POST", url, body, hdr())
			evs := events(s.rest())
			if len(evs) == 0 || !strings.Contains(evs[0].Data, f.RunID) {
				t.Errorf("the re-signed retry streamed %v; want the first run %s", evs, f.RunID)
			}
			if r, th := runCount(t, h), threadCount(t, h); r != runs || th != threads {
				t.Fatalf("the re-signed retry wrote runs %d→%d threads %d→%d; want nothing written", runs, r, threads, th)
			}
			p.None()
		})
	}
}

// A stale proof is never an error by itself (design.md §The doors): on a request its
// presenter did not make before, or when it does not verify — signed by
// another key than the one it names, or over another body — the request
// is an anonymous caller's and is served, even when its key is in the
// scope of the presenter the proof names (a forger learns nothing of it).
func TestOutsideStalePresenterProofIsOtherwiseAnonymous(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	clock := &stepClock{now: time.Now()}
	srv := startDoor(t, h, func(o *agui.Options) { o.Now = clock.Now })
	url := aguiURL(srv, p.Key, "echo")
	me, other := signer(t, 0xc1), signer(t, 0xc2)
	serve := func(what, body string, hdr map[string]string) {
		t.Helper()
		runs := runCount(t, h)
		s := openStream(t, "POST", url, body, hdr)
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
		evs := events(s.rest())
		if len(evs) == 0 || !strings.Contains(evs[0].Data, f.RunID) {
			t.Errorf("%s: streamed %v; want the new run %s", what, evs, f.RunID)
		}
		if r := runCount(t, h); r != runs+1 {
			t.Errorf("%s: runs %d→%d; want one new run", what, runs, r)
		}
	}
	body, third := input("new", "r-1", ""), input("new", "r-3", "")
	first := time.Now().Unix()
	serve("the presenter's first turn", body, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(body)), agui.IdempotencyHeader: "k-1"})
	serve("the presenter's other first turn", third, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(third)), agui.IdempotencyHeader: "k-3"})
	clock.add(2 * time.Minute)

	other2 := input("new", "r-2", "")
	serve("a stale proof, its key new to the presenter", other2, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(other2)), agui.IdempotencyHeader: "k-2"})

	forged := strings.Replace(identity.MakePresenterHeader(other, first, []byte(body)),
		other.PublicKeyHex(), me.PublicKeyHex(), 1)
	serve("a stale proof naming the presenter, signed by another key", body, map[string]string{
		identity.PresenterHeader: forged, agui.IdempotencyHeader: "k-1"})

	serve("a stale proof of the presenter's over another body", third, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(body)), agui.IdempotencyHeader: "k-3"})
	p.None()
}
