package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A deposed leader frozen (or cut off) in the middle of a fenced
// transaction still holds broker_leader FOR SHARE. The takeover does not
// wait for it forever: it ends that transaction and advances the epoch, and
// the old leader's write never lands.
func TestTakeoverEndsAFrozenLeadersTransaction(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	seedAgent(t, st)
	old, err := st.AdvanceEpoch(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	r := newRun(t, st)

	// The old leader's connection: a fenced transaction, left open.
	frozen, err := pgx.Connect(ctx, st.Pool().Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Close(context.Background()) })
	tx, err := frozen.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen int64
	if err := tx.QueryRow(ctx, `SELECT epoch FROM broker_leader WHERE id = 1 FOR SHARE`).Scan(&seen); err != nil || seen != old {
		t.Fatalf("fence as the old leader: epoch %d, %v", seen, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE runs SET status = 'offering' WHERE run_id = $1`, r.RunID); err != nil {
		t.Fatal(err)
	}

	cur, err := st.AdvanceEpoch(ctx, "node-b")
	if err != nil {
		t.Fatalf("takeover with a frozen leader's transaction open: %v", err)
	}
	if cur != old+1 {
		t.Fatalf("epoch %d after takeover, want %d", cur, old+1)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the deposed leader's transaction committed after the takeover")
	}
	got, err := st.GetRun(ctx, r.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != run.Queued {
		t.Fatalf("the deposed leader's write landed: status %s, want queued", got.Status)
	}
	l, err := st.CurrentLeader(ctx)
	if err != nil || l.Holder != "node-b" || l.Epoch != cur {
		t.Fatalf("leader of record %+v, %v; want node-b at %d", l, err, cur)
	}
}
