package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
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

// The takeover ends fenced transactions of its own database only. Every
// funduq database created from one schema gives broker_leader the same
// relation OID, and pg_locks lists the locks of every database on the
// server: a takeover in one must not end a transaction in another (two
// deployments sharing a server, or two tests running side by side).
func TestTakeoverEndsOnlyItsOwnDatabasesTransactions(t *testing.T) {
	ctx := context.Background()
	mine, other := storetest.Store(t), storetest.Store(t)
	if _, err := mine.AdvanceEpoch(ctx, "node-a"); err != nil {
		t.Fatal(err)
	}
	open := func(pool string) pgx.Tx {
		t.Helper()
		c, err := pgx.Connect(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT epoch FROM broker_leader WHERE id = 1 FOR SHARE`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	bystander := open(other.Pool().Config().ConnString())
	frozen := open(mine.Pool().Config().ConnString())
	if _, err := mine.AdvanceEpoch(ctx, "node-b"); err != nil {
		t.Fatalf("takeover with a frozen leader's transaction open: %v", err)
	}
	if err := frozen.Commit(ctx); err == nil {
		t.Fatal("the deposed leader's transaction survived the takeover")
	}
	if err := bystander.Commit(ctx); err != nil {
		t.Fatalf("a transaction of another database was ended by this one's takeover: %v", err)
	}
}

// Adopt refuses a run that is no longer held (running or cancelling) with
// a *TransitionError naming the status it found, which the broker's write
// loop takes for a refusal, not a failing database it should retry until
// it steps down; a run that does not exist is ErrNotFound.
func TestAdoptRefusesARunNotHeld(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	seedAgent(t, st)
	epoch, err := st.AdvanceEpoch(ctx, "leader")
	if err != nil {
		t.Fatal(err)
	}
	r := newRun(t, st)
	forceStatus(t, st, r.RunID, run.Failed)
	_, err = st.Adopt(ctx, epoch, r.RunID)
	var te *store.TransitionError
	if !errors.Is(err, store.ErrIllegalTransition) || !errors.As(err, &te) || te.From != run.Failed {
		t.Fatalf("adopt of a failed run: %v, want a TransitionError from failed", err)
	}
	if got, err := st.GetRun(ctx, r.RunID); err != nil || got.Status != run.Failed {
		t.Fatalf("the refused adopt changed the run: %s (%v)", got.Status, err)
	}
	if _, err := st.Adopt(ctx, epoch, "run_000000000000000000000000"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("adopt of an unknown run: %v, want ErrNotFound", err)
	}
}
