package a2a_test

import (
	"context"
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
