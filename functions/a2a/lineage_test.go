package a2a_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/run"
)

// parentOf is the lineage recorded for thread id ("" for none).
func (a *authz) parentOf(id string) string {
	a.t.Helper()
	var parent string
	if err := a.h.Store.Pool().QueryRow(context.Background(),
		`SELECT coalesce(parent_thread_id, '') FROM threads WHERE thread_id = $1`, id).Scan(&parent); err != nil {
		a.t.Fatal(err)
	}
	return parent
}

// completeNext completes the run offered next and returns its thread.
func (a *authz) completeNext() string {
	a.t.Helper()
	f := a.p.Offer()
	a.p.Accept(f.RunID)
	a.p.Complete(f.RunID, *f.ThreadID)
	a.h.WaitStatus(f.RunID, run.Completed)
	return *f.ThreadID
}

// A reference is lineage only when the caller may read the task it names.
// A stranger naming a bound task in referenceTaskIds recorded that task's
// context as its new context's parent: retention keeps a thread while it
// has children, so anyone holding a task id could keep another caller's
// conversation from being deleted. The stranger's reference is now ignored
// as an unknown task's is (D16); the head's own reference still records
// its lineage.
func TestReferenceToAnUnreadableTaskRecordsNoLineage(t *testing.T) {
	a := newAuthz(t)
	bound, boundCtx := a.completedBound("m-1")

	strangers := make(chan string, 1)
	go func() { strangers <- a.completeNext() }()
	if r := a.callAs("message/send", map[string]any{"message": a.c.message("s-1", "mine now",
		map[string]any{"referenceTaskIds": []string{bound}})}, nil); r.Error != nil {
		t.Fatalf("the stranger's send: %+v", r.Error)
	}
	if got := a.parentOf(<-strangers); got != "" {
		t.Fatalf("a stranger's reference to a bound task made %s its context's parent", got)
	}

	heads := make(chan string, 1)
	go func() { heads <- a.completeNext() }()
	if r := a.boundSend(a.c.message("h-2", "follow-up", map[string]any{"referenceTaskIds": []string{bound}}), nil, false); r.Error != nil {
		t.Fatalf("the head's send: %+v", r.Error)
	}
	if got := a.parentOf(<-heads); got != boundCtx {
		t.Fatalf("the head's reference to its own task: parent %q, want %s", got, boundCtx)
	}
}

// answerShape is a send's answer with what differs between any two sends
// (ids, times) blanked, so two answers compare as a caller reads them.
func answerShape(t *testing.T, r rpcResp) string {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("send refused: %+v", r.Error)
	}
	b, err := json.Marshal(r.Result)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, id := range []string{r.Result["id"].(string), r.Result["contextId"].(string)} {
		s = strings.ReplaceAll(s, id, "ID")
	}
	s = idOrTime.ReplaceAllString(s, "X")
	return fmt.Sprintf("%d %s", r.Status, s)
}

var idOrTime = regexp.MustCompile(`(msg|run|thread)_[0-9A-Za-z]+|\d{4}-\d\d-\d\dT[0-9:.]+Z`)

// D16: a reference the caller may not read says no more than an unknown
// one. A stranger's message listing H's bound task alone records no
// parent and is answered exactly as one listing an unknown task; listing
// H's task first and its own earlier task second, its own parents the new
// context, as it would after an unknown id.
func TestReferenceToAnotherCallersBoundTaskIsAnUnknownOne(t *testing.T) {
	a := newAuthz(t)
	bound, _ := a.completedBound("m-1")
	send := func(id string, refs ...string) (rpcResp, string) {
		t.Helper()
		ctxs := make(chan string, 1)
		go func() { ctxs <- a.completeNext() }()
		r := a.callAs("message/send", map[string]any{"message": a.c.message(id, "follow-up",
			map[string]any{"referenceTaskIds": refs})}, nil)
		return r, <-ctxs
	}
	toBound, boundCtx := send("s-1", bound)
	toUnknown, unknownCtx := send("s-2", unknownTask)
	if p, q := a.parentOf(boundCtx), a.parentOf(unknownCtx); p != "" || q != "" {
		t.Fatalf("parents: %q for H's bound task, %q for an unknown one", p, q)
	}
	if got, want := answerShape(t, toBound), answerShape(t, toUnknown); got != want {
		t.Fatalf("listing H's bound task answered\n%s\nlisting an unknown one\n%s", got, want)
	}
	if strings.Contains(fmt.Sprint(toBound.Result), bound) {
		t.Fatalf("the answer names H's task: %v", toBound.Result)
	}

	own := toUnknown.Result["id"].(string)
	_, ctx := send("s-3", bound, own)
	if got := a.parentOf(ctx); got != unknownCtx {
		t.Fatalf("H's task then the stranger's own: parent %q, want %s", got, unknownCtx)
	}
}

// The door looks at no more than the first eight references (a bound on
// the look-ups one message makes, docs/design.md §The doors): the caller's
// own task ninth is not its parent, eighth it is.
func TestLineageLooksAtTheFirstEightReferences(t *testing.T) {
	a := newAuthz(t)
	own, ownCtx := a.completedBound("m-1")
	for _, tc := range []struct {
		unknown int
		parent  bool
	}{{7, true}, {8, false}} {
		refs := make([]string, 0, tc.unknown+1)
		for range tc.unknown {
			refs = append(refs, run.NewRunID())
		}
		refs = append(refs, own)
		ctxs := make(chan string, 1)
		go func() { ctxs <- a.completeNext() }()
		if r := a.boundSend(a.c.message(fmt.Sprintf("e-%d", tc.unknown), "follow-up",
			map[string]any{"referenceTaskIds": refs}), nil, true); r.Error != nil {
			t.Fatalf("send: %+v", r.Error)
		}
		want := ""
		if tc.parent {
			want = ownCtx
		}
		if got := a.parentOf(<-ctxs); got != want {
			t.Fatalf("its own task after %d unknown ids: parent %q, want %q", tc.unknown, got, want)
		}
	}
}
