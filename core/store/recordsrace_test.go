package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// A provider registering, and a door admitting a run for, an agent records
// retention is deleting at that moment: whichever wins, a register answered
// has its agents and providers rows served, and a door's insert either
// makes the run on the row or is told the agent is gone (the doors' 404),
// never another error. Rounds of real transactions racing on PostgreSQL.
func TestRegisterAndAdmitRacingTheRecordsPrune(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	epoch, err := st.AdvanceEpoch(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	stale := func(key string) {
		t.Helper()
		if _, err := st.Pool().Exec(ctx, `UPDATE agents SET served_epoch = NULL, back_until = NULL,
			last_seen_at = now() - interval '10 days', unserved_since = now() - interval '10 days' WHERE provider_key = $1`, key); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Pool().Exec(ctx, `UPDATE providers SET first_seen_at = now() - interval '10 days',
			updated_at = now() - interval '10 days' WHERE public_key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
	var pruned, registeredOverPrune, admitted, gone int
	for i := 0; i < 60; i++ {
		signer, err := identity.NewSignerFromSeedHex(fmt.Sprintf("%064x", 0x5000+i))
		if err != nil {
			t.Fatal(err)
		}
		key := signer.PublicKeyHex()
		storetest.Agent(t, st, key, "a")
		stale(key)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var regErr, pruneErr, admitErr error
		var p store.PrunedRecords
		wg.Add(3)
		go func() {
			defer wg.Done()
			<-start
			regErr = st.RegisterAgents(ctx, epoch, store.Provider{PublicKey: key, Fingerprint: fingerprintOf(t, key)},
				[]store.Agent{{ProviderKey: key, Name: "a"}})
		}()
		go func() {
			defer wg.Done()
			<-start
			p, pruneErr = st.PruneRecordsBatch(ctx, time.Now().Add(-7*24*time.Hour), "", 500)
		}()
		go func() {
			defer wg.Done()
			<-start
			runID, threadID := run.NewRunID(), run.NewThreadID()
			input, _ := json.Marshal(map[string]any{"threadId": threadID, "runId": runID})
			_, admitErr = st.Admit(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: key, AgentName: "a",
				CreateThread: &store.NewThread{}, RunInput: input})
		}()
		close(start)
		wg.Wait()
		if regErr != nil || pruneErr != nil {
			t.Fatalf("round %d: register %v, prune %v", i, regErr, pruneErr)
		}
		switch {
		case admitErr == nil:
			admitted++
		case errors.Is(admitErr, store.ErrAgentGone):
			gone++
		default:
			t.Fatalf("round %d: the door's insert: %v; want the run or ErrAgentGone", i, admitErr)
		}
		pruned += int(p.Agents)
		var served *int64
		if err := st.Pool().QueryRow(ctx, `SELECT a.served_epoch FROM agents a JOIN providers p ON p.public_key = a.provider_key
			WHERE a.provider_key = $1 AND a.name = 'a'`, key).Scan(&served); err != nil {
			t.Fatalf("round %d: the register was answered, and its agent or provider row is gone (pruned %d): %v", i, p.Agents, err)
		}
		if served == nil || *served != epoch {
			t.Fatalf("round %d: the registered agent reads served_epoch %v, want %d", i, served, epoch)
		}
		if p.Agents > 0 {
			registeredOverPrune++
		}
		// Next round's prune must not see this key as stale.
		if _, err := st.Pool().Exec(ctx, `UPDATE agents SET last_seen_at = now() WHERE provider_key = $1`, key); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("rounds: the prune deleted first %d, the door admitted %d, told gone %d", registeredOverPrune, admitted, gone)
}

func fingerprintOf(t *testing.T, key string) string {
	t.Helper()
	pub, err := identity.ParsePublicKey(key)
	if err != nil {
		t.Error(err)
	}
	return identity.Fingerprint(pub)
}
