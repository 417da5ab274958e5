package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// firstTurn is a door's NewRun for a first turn carrying an idempotency
// key: each attempt mints its own run and thread ids, as a door does.
func firstTurn(key, hash string) store.NewRun {
	runID, threadID := run.NewRunID(), run.NewThreadID()
	input, _ := json.Marshal(map[string]any{"threadId": threadID, "runId": runID})
	return store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: testProviderKey, AgentName: testAgent,
		CreateThread: &store.NewThread{}, RunInput: input, IdempotencyKey: key, RequestHash: hash,
		Messages: []store.Message{{MessageID: run.NewMessageID(), Message: json.RawMessage(`{"role":"user","content":"hi"}`)}}}
}

// The doors no longer look a retry up before the insert: Admit's own
// look-up answers it, and of attempts racing each other exactly one writes
// the run while every other returns that run.
func TestAdmitRacingRetriesMakeOneRun(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	const attempts = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	out := make([]store.Admitted, attempts)
	errs := make([]error, attempts)
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i], errs[i] = st.Admit(ctx, firstTurn("anon:k1", "h1"))
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range attempts {
		if errs[i] != nil {
			t.Fatalf("attempt %d: %v", i, errs[i])
		}
		if out[i].Created {
			created++
		}
		if out[i].RunID != out[0].RunID || out[i].After != 0 {
			t.Fatalf("attempt %d answered run %s (after %d), attempt 0 run %s", i, out[i].RunID, out[i].After, out[0].RunID)
		}
	}
	if created != 1 {
		t.Fatalf("%d attempts wrote a run, want 1", created)
	}
	var runs, threads, msgs int
	if err := st.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM threads),
		(SELECT count(*) FROM thread_messages)`).Scan(&runs, &threads, &msgs); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || threads != 1 || msgs != 1 {
		t.Fatalf("stored %d runs, %d threads, %d messages; want one each", runs, threads, msgs)
	}
	// The same key with another request is refused, not answered.
	if _, err := st.Admit(ctx, firstTurn("anon:k1", "h2")); !errors.Is(err, store.ErrKeyReused) {
		t.Fatalf("key reused with another request: %v", err)
	}
}

// A first turn naming a thread id the door took for unknown without
// reading it writes nothing when that thread exists.
func TestAdmitUnlessThread(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	existing := newRun(t, st)

	nr := firstTurn("", "")
	nr.UnlessThread = existing.ThreadID
	if _, err := st.Admit(ctx, nr); !errors.Is(err, store.ErrThreadExists) {
		t.Fatalf("Admit naming an existing thread: %v", err)
	}
	if _, err := st.GetRun(ctx, nr.RunID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused run was written: %v", err)
	}

	nr = firstTurn("", "")
	nr.UnlessThread = "the-callers-own-id"
	a, err := st.Admit(ctx, nr)
	if err != nil || !a.Created || a.ThreadID != nr.ThreadID {
		t.Fatalf("Admit naming an unknown thread: %+v, %v", a, err)
	}
}

// A run whose agent was deleted after the door resolved it is refused
// with ErrAgentGone (the doors answer it as an unknown agent).
func TestAdmitAgentGone(t *testing.T) {
	st := storetest.Store(t)
	seedAgent(t, st)
	ctx := context.Background()
	if _, err := st.Pool().Exec(ctx, `DELETE FROM agents`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Admit(ctx, firstTurn("", "")); !errors.Is(err, store.ErrAgentGone) {
		t.Fatalf("Admit for a deleted agent: %v", err)
	}
}
