package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// Two processes of a key never recorded register at once (design.md §Two
// processes of one key): both
// writes of the providers row are one key's, so both land. Each round
// holds the providers table locked until both registers wait on it, then
// lets them go together, so that both pass the insert's conflict check
// before either row is in the indexes — the window in which the second
// met the first on the fingerprint's unique index, with no arbiter for it.
func TestFirstRegistersOfANewKeyAtOnce(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	epoch, err := st.AdvanceEpoch(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		signer, err := identity.NewSignerFromSeedHex(fmt.Sprintf("%064x", 0x6100+i))
		if err != nil {
			t.Fatal(err)
		}
		key := signer.PublicKeyHex()
		p := store.Provider{PublicKey: key, Fingerprint: fingerprintOf(t, key)}
		locker, err := st.Pool().Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := locker.Exec(ctx, `LOCK TABLE providers IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for n := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[n] = st.RegisterAgents(ctx, epoch, p, []store.Agent{{ProviderKey: key, Name: "x"}})
			}()
		}
		waitLockWaiters(t, st, 2)
		if err := locker.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for n, err := range errs {
			if err != nil {
				t.Fatalf("round %d: register %d of the key's two at once: %v", i, n, err)
			}
		}
	}
}

// A fingerprint another key truly holds is still refused: the only
// refusal that says "use another key".
func TestRegisterOfAFingerprintAnotherKeyHoldsIsRefused(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	epoch, err := st.AdvanceEpoch(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := identity.NewSignerFromSeedHex(fmt.Sprintf("%064x", 0x6200))
	if err != nil {
		t.Fatal(err)
	}
	key := signer.PublicKeyHex()
	fp := fingerprintOf(t, key)
	other := strings.Repeat("e", 64) // no key of ours: a row as a colliding key would leave it
	if _, err := st.Pool().Exec(ctx, `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)`, other, fp); err != nil {
		t.Fatal(err)
	}
	err = st.RegisterAgents(ctx, epoch, store.Provider{PublicKey: key, Fingerprint: fp}, []store.Agent{{ProviderKey: key, Name: "x"}})
	if !errors.Is(err, store.ErrFingerprintTaken) {
		t.Fatalf("register of a fingerprint %s holds: %v, want ErrFingerprintTaken", other[:8], err)
	}
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM agents WHERE provider_key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a refused register wrote %d agents", n)
	}
}

// waitLockWaiters waits until n sessions of st's database wait on a lock.
func waitLockWaiters(t *testing.T, st *store.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // a bound on a hang, not a timing assertion
	for {
		var waiting int
		err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait on a lock, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
