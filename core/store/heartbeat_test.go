package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// Issue #21, deliverable 7: an agent is online only while the leader that
// serves it is alive. The epoch alone says whose roster counts, not that
// its leader still runs: a leader killed or frozen keeps its epoch until a
// standby takes over, and its agents must not read online meanwhile.
func TestAgentsOnlineOnlyWhileTheLeaderBeats(t *testing.T) {
	st := storetest.Store(t)
	ctx := context.Background()
	epoch, err := st.AdvanceEpoch(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterAgents(ctx, epoch, store.Provider{PublicKey: testProviderKey, Fingerprint: testFingerprint},
		[]store.Agent{{ProviderKey: testProviderKey, Name: testAgent}}); err != nil {
		t.Fatal(err)
	}
	online := func() (agents, providers bool) {
		t.Helper()
		as, err := st.ListAgents(ctx)
		if err != nil || len(as) != 1 {
			t.Fatalf("agents %+v %v", as, err)
		}
		ps, total, err := st.OnlineProviders(ctx, 10)
		if err != nil || len(ps) != total || total > 1 {
			t.Fatalf("providers %+v (%d in all) %v", ps, total, err)
		}
		return as[0].Online, total == 1 && ps[0].PublicKey == testProviderKey && len(ps[0].Online) == 1
	}
	if a, p := online(); a || p {
		t.Fatalf("online (%v, %v) before the leader's first heartbeat", a, p)
	}
	if err := st.Heartbeat(ctx, epoch, time.Minute); err != nil {
		t.Fatal(err)
	}
	if a, p := online(); !a || !p {
		t.Fatalf("online (%v, %v) while the leader beats", a, p)
	}
	// An older epoch's late heartbeat never revives a newer one's row.
	if err := st.Heartbeat(ctx, epoch-1, time.Hour); err != nil {
		t.Fatal(err)
	}
	// The leader stops leading (ttl 0): offline at once.
	if err := st.Heartbeat(ctx, epoch, 0); err != nil {
		t.Fatal(err)
	}
	if a, p := online(); a || p {
		t.Fatalf("online (%v, %v) after the leader stopped", a, p)
	}
	// A short beat that runs out (a killed leader's last one) reads offline
	// once PostgreSQL's clock passes it.
	if err := st.Heartbeat(ctx, epoch, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var passed bool
	for !passed {
		if err := st.Pool().QueryRow(ctx, `SELECT alive_until < now() FROM broker_heartbeat`).Scan(&passed); err != nil {
			t.Fatal(err)
		}
	}
	if a, p := online(); a || p {
		t.Fatalf("online (%v, %v) after the last heartbeat ran out", a, p)
	}
	// A new leader's roster is not online under the old leader's beat.
	if err := st.Heartbeat(ctx, epoch, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AdvanceEpoch(ctx, "node-b"); err != nil {
		t.Fatal(err)
	}
	if a, p := online(); a || p {
		t.Fatalf("online (%v, %v) under a new epoch", a, p)
	}
}
