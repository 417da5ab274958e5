package a2a_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// stepClock is a door clock a test moves forward.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *stepClock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// The A2A door's side of the AG-UI test of the same name: a presenting
// caller's first message, sent again unchanged once its Funduq-Presenter
// proof is out of its ±60 s window, is refused (-32040, HTTP 401,
// data.reason presenter_proof_stale) and writes nothing when that
// presenter sent it before — by its Idempotency-Key, or without one by
// its messageId — where it used to open a second context and run again
// (D13). Re-signed, the retry answers the first task.
func TestOutsideRetryWhosePresenterProofWentStale(t *testing.T) {
	for _, c := range []struct{ name, key string }{
		{"Idempotency-Key", "k-1"},
		{"messageId, no key", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			clock := &stepClock{now: time.Now()}
			cl := newClient(t, startDoor(t, h, func(o *a2a.Options) { o.Now = clock.Now }), p.Key, "echo", "")
			me := signer(t, 0xc1)
			body := cl.body("message/send", map[string]any{"message": cl.message("m-1", "hello", nil),
				"configuration": map[string]any{"blocking": false}})
			hdr := func() map[string]string {
				m := map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(me, clock.Now().Unix(), []byte(body))}
				if c.key != "" {
					m[a2a.IdempotencyHeader] = c.key
				}
				return m
			}
			sent := hdr()
			played := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
			r := cl.rawCall(body, sent)
			if r.Error != nil {
				t.Fatalf("the first message: %+v", r.Error)
			}
			first := r.Result["id"]
			h.WaitStatus(recv(t, played, "the first message's offer").RunID, run.Completed)
			runs, threads := count(t, h, "runs"), count(t, h, "threads")

			clock.add(2 * time.Minute)
			r = cl.rawCall(body, sent)
			if r.Error == nil || r.Status != 401 || r.Error.Code != a2a.CodeUnauthenticated || r.Error.Data["reason"] != door.CodePresenterProofStale {
				t.Errorf("the retry, its presenter proof stale: %d %+v (result %v); want 401 %d %s",
					r.Status, r.Error, r.Result, a2a.CodeUnauthenticated, door.CodePresenterProofStale)
			}
			if rn, th := count(t, h, "runs"), count(t, h, "threads"); rn != runs || th != threads {
				t.Fatalf("the retry, its presenter proof stale, wrote runs %d→%d threads %d→%d; want nothing written",
					runs, rn, threads, th)
			}

			r = cl.rawCall(body, hdr())
			if r.Error != nil || r.Result["id"] != first {
				t.Errorf("the re-signed retry: %+v (result %v); want the first task %v", r.Error, r.Result, first)
			}
			if rn, th := count(t, h, "runs"), count(t, h, "threads"); rn != runs || th != threads {
				t.Fatalf("the re-signed retry wrote runs %d→%d threads %d→%d; want nothing written", runs, rn, threads, th)
			}
			p.None()
		})
	}
}

// A stale proof is never an error by itself (design.md §The doors): on a message its
// presenter did not send before, or when it does not verify — signed by
// another key than the one it names, or over another body — the message
// is an anonymous caller's and is served, even when its key is in the
// scope of the presenter the proof names.
func TestOutsideStalePresenterProofIsOtherwiseAnonymous(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	clock := &stepClock{now: time.Now()}
	cl := newClient(t, startDoor(t, h, func(o *a2a.Options) { o.Now = clock.Now }), p.Key, "echo", "")
	me, other := signer(t, 0xc1), signer(t, 0xc2)
	msg := func(id string) string {
		return cl.body("message/send", map[string]any{"message": cl.message(id, "hello", nil),
			"configuration": map[string]any{"blocking": false}})
	}
	serve := func(what, body string, hdr map[string]string) {
		t.Helper()
		runs := count(t, h, "runs")
		played := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
		r := cl.rawCall(body, hdr)
		if r.Error != nil {
			t.Fatalf("%s: refused %d %+v; want it served", what, r.Status, r.Error)
		}
		f := recv(t, played, what)
		h.WaitStatus(f.RunID, run.Completed)
		if r.Result["id"] != f.RunID {
			t.Errorf("%s: answered task %v; want the new one %s", what, r.Result["id"], f.RunID)
		}
		if n := count(t, h, "runs"); n != runs+1 {
			t.Errorf("%s: runs %d→%d; want one new run", what, runs, n)
		}
	}
	body, third := msg("m-1"), msg("m-3")
	first := time.Now().Unix()
	serve("the presenter's first message", body, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(body)), a2a.IdempotencyHeader: "k-1"})
	serve("the presenter's other first message", third, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(third)), a2a.IdempotencyHeader: "k-3"})
	clock.add(2 * time.Minute)

	second := msg("m-2")
	serve("a stale proof, its key new to the presenter", second, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(second)), a2a.IdempotencyHeader: "k-2"})

	forged := strings.Replace(identity.MakePresenterHeader(other, first, []byte(body)),
		other.PublicKeyHex(), me.PublicKeyHex(), 1)
	serve("a stale proof naming the presenter, signed by another key", body, map[string]string{
		identity.PresenterHeader: forged, a2a.IdempotencyHeader: "k-1"})

	serve("a stale proof of the presenter's over another body", third, map[string]string{
		identity.PresenterHeader: identity.MakePresenterHeader(me, first, []byte(body)), a2a.IdempotencyHeader: "k-3"})
	p.None()
}

// The same on a context the presenter opened: its follow-up message, sent
// again once its proof went stale, is refused 401 presenter_proof_stale
// and writes nothing, as its first message would be (the test above
// covered a first message only). Re-signed, the retry answers the first
// task.
func TestOutsideFollowUpWhosePresenterProofWentStale(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	clock := &stepClock{now: time.Now()}
	cl := newClient(t, startDoor(t, h, func(o *a2a.Options) { o.Now = clock.Now }), p.Key, "echo", "")
	me := signer(t, 0xc1)
	signed := func(body string) map[string]string {
		return map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(me, clock.Now().Unix(), []byte(body))}
	}
	send := func(what, body string, hdr map[string]string) map[string]any {
		t.Helper()
		played := playNext(p, func(r, th string) []string { return []string{runStarted(th, r), runFinished(th, r)} })
		r := cl.rawCall(body, hdr)
		if r.Error != nil {
			t.Fatalf("%s: %d %+v", what, r.Status, r.Error)
		}
		h.WaitStatus(recv(t, played, what).RunID, run.Completed)
		return r.Result
	}
	first := cl.body("message/send", map[string]any{"message": cl.message("m-1", "hello", nil),
		"configuration": map[string]any{"blocking": false}})
	ctxID, _ := send("the first message", first, signed(first))["contextId"].(string)
	if ctxID == "" {
		t.Fatal("the first message opened no context")
	}
	follow := cl.body("message/send", map[string]any{"message": cl.message("m-2", "again", map[string]any{"contextId": ctxID}),
		"configuration": map[string]any{"blocking": false}})
	sent := signed(follow)
	task := send("the follow-up", follow, sent)["id"]
	runs, threads := count(t, h, "runs"), count(t, h, "threads")

	clock.add(2 * time.Minute)
	r := cl.rawCall(follow, sent)
	if r.Error == nil || r.Status != 401 || r.Error.Code != a2a.CodeUnauthenticated || r.Error.Data["reason"] != door.CodePresenterProofStale {
		t.Errorf("the follow-up again, its presenter proof stale: %d %+v (result %v); want 401 %d %s",
			r.Status, r.Error, r.Result, a2a.CodeUnauthenticated, door.CodePresenterProofStale)
	}
	if rn, th := count(t, h, "runs"), count(t, h, "threads"); rn != runs || th != threads {
		t.Fatalf("the stale retry wrote runs %d→%d threads %d→%d; want nothing written", runs, rn, threads, th)
	}
	r = cl.rawCall(follow, signed(follow))
	if r.Error != nil || r.Result["id"] != task {
		t.Errorf("the re-signed retry: %+v (result %v); want the first task %v", r.Error, r.Result, task)
	}
	p.None()
}
