package agui_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/door"
)

// The authority matrix of the AG-UI door (README "Security and limits"):
// for every route acting on a bound run or thread, what each party gets.
// One subtest per cell; "unknown" means exactly the answer an unknown id
// gets (status, code and message).
func TestAuthorityMatrix(t *testing.T) {
	a := newAuthz(t)
	thread, runID := a.completedBound()
	otherThread, otherRun := a.completedBound()
	now := time.Now().Unix()
	const unknownThread, unknownRun = "thread_000000000000000000000000", "run_000000000000000000000000"
	stale := now - 3600
	lifted := presenterHdr(a.head, `{"some":"other body"}`)

	type party struct {
		name string
		seat string
		hdr  func(id, other string) map[string]string
		ok   bool
	}
	parties := []party{
		{"head", "", func(id, _ string) map[string]string { return view(a.head, id, now) }, true},
		{"presenter", a.pres.PublicKeyHex(), func(string, string) map[string]string { return nil }, true},
		{"provider", "", func(id, _ string) map[string]string { return view(a.prov, id, now) }, true},
		{"other provider", "", func(id, _ string) map[string]string { return view(a.otherProv, id, now) }, false},
		{"stranger", "", func(string, string) map[string]string { return nil }, false},
		{"replayed proof", "", func(string, string) map[string]string { return lifted }, false},
		{"proof for another run", "", func(_, other string) map[string]string { return view(a.head, other, now) }, false},
		{"expired proof", "", func(id, _ string) map[string]string { return view(a.head, id, stale) }, false},
	}
	reads := []struct {
		route, path, id, other, unknownPath, unknownID string
		okType                                         string
	}{
		{"GET /threads/{id}", "/threads/" + thread, thread, otherThread, "/threads/" + unknownThread, unknownThread, "application/json"},
		{"GET /runs/{id}/events", "/runs/" + runID + "/events", runID, otherRun, "/runs/" + unknownRun + "/events", unknownRun, "text/event-stream"},
	}
	for _, rd := range reads {
		unknown := a.get(rd.unknownPath, nil)
		for _, p := range parties {
			t.Run(rd.route+"/"+p.name, func(t *testing.T) {
				a.seat = p.seat
				defer func() { a.seat = "" }()
				got := a.get(rd.path, p.hdr(rd.id, rd.other))
				if p.ok {
					if got.Status != 200 || got.Type[:len(rd.okType)] != rd.okType {
						t.Fatalf("a party got %+v", got)
					}
					return
				}
				got.Message = replaceID(got.Message, rd.id, rd.unknownID)
				unknownLike(t, got, unknown)
			})
		}
	}

	// Answering a pause (POST with resume): one paused thread per cell.
	type answerer struct {
		name      string
		signer    *identity.Signer // presents the chain; nil: no chain
		chain     func() []string
		proofBy   *identity.Signer
		proofRun  func(paused string) string
		proofAsks []string
		presentTS int64
		status    int
		code      string
	}
	asks := []string{"tc1", "tc2"}
	same := func(p string) string { return p }
	headChain := func() []string { return chainOf(t, a.head) }
	answerers := []answerer{
		{"head", a.head, headChain, a.head, same, asks, now, 200, ""},
		{"presenter", a.pres, a.delegated, a.pres, same, asks, now, 401, door.CodeInvalidResolution},
		{"provider", a.prov, func() []string { return chainOf(t, a.prov) }, a.prov, same, asks, now, 200, ""},
		{"other provider", a.otherProv, func() []string { return chainOf(t, a.otherProv) }, a.otherProv, same, asks, now, 404, door.CodeThreadNotFound},
		{"stranger", nil, nil, nil, same, asks, now, 404, door.CodeThreadNotFound},
		{"replayed proof", a.head, headChain, a.head, same, []string{"tc0"}, now, 401, door.CodeInvalidResolution},
		{"proof for another run", a.head, headChain, a.head, func(string) string { return otherRun }, asks, now, 401, door.CodeInvalidResolution},
		{"expired proof", a.head, headChain, a.head, same, asks, stale, 401, door.CodePresenterRequired},
	}
	for _, an := range answerers {
		t.Run("POST /agui answer/"+an.name, func(t *testing.T) {
			f := a.pausedBound()
			bag := ""
			if an.chain != nil {
				bag = `"actorChain":` + mustJSON(an.chain()) + `,"resolution":` + resolution(an.proofBy, an.proofRun(f.RunID), an.proofAsks)
			}
			body := fmt.Sprintf(`{"threadId":%q,"runId":"ans","messages":[%s],"tools":[],"context":[],"forwardedProps":{%s},%s}`,
				*f.ThreadID, toolTC2, bag, resumeInt1)
			var hdr map[string]string
			if an.signer != nil {
				hdr = map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(an.signer, an.presentTS, []byte(body))}
			}
			if an.status == 200 {
				s := openStream(t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", body, hdr)
				if f2 := a.p.Offer(); f2.RunID != f.RunID {
					t.Fatalf("the answer opened %s", f2.RunID)
				}
				a.p.Accept(f.RunID)
				a.p.Complete(f.RunID, *f.ThreadID)
				s.rest()
				return
			}
			code, _, got := jsonCall(t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", body, hdr)
			if code != an.status || errCode(got) != an.code || a.h.Run(f.RunID).Status != "input-required" {
				t.Fatalf("got %d %v, want %d %s and the pause untouched", code, got, an.status, an.code)
			}
			if an.status == 404 {
				// Exactly the unknown thread's answer.
				ubody := replaceID(body, *f.ThreadID, unknownThread)
				var uhdr map[string]string
				if an.signer != nil {
					uhdr = map[string]string{identity.PresenterHeader: identity.MakePresenterHeader(an.signer, an.presentTS, []byte(ubody))}
				}
				ucode, _, ugot := jsonCall(t, "POST", a.srv+"/agui/"+a.p.Key+"/echo", ubody, uhdr)
				if ucode != code || mustJSON(ugot) != replaceID(mustJSON(got), *f.ThreadID, unknownThread) {
					t.Fatalf("got %d %v, an unknown thread %d %v", code, got, ucode, ugot)
				}
			}
		})
	}
}

func replaceID(s, id, with string) string { return strings.ReplaceAll(s, id, with) }
