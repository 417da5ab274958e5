package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/store/storetest"
)

// Reproduction (chaos seeds 40 and 41 under load): a provider's link was
// lost just before the leader died; its link grace ran out while the next
// leader waited for the lease, so the takeover did not count it as
// expected back and its runs failed agent_offline though it reconnected
// within provider_grace. A grace still running when the previous leader
// went away — up to a lease TTL before the takeover — counts.
func TestLostLinkIsExpectedBackThoughItsGraceEndedDuringTheLeaseWait(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	storetest.Agent(t, st, testProviderKey, "echo")
	old, err := st.AdvanceEpoch(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkServed(ctx, old, testProviderKey, []string{"echo"}); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkLost(ctx, old, testProviderKey, []string{"echo"}, time.Second); err != nil {
		t.Fatal(err)
	}
	// The grace ended 3 s ago, while the lease (TTL 10 s) had not lapsed yet.
	if _, err := st.Pool().Exec(ctx, `UPDATE agents SET back_until = now() - interval '3 seconds'`); err != nil {
		t.Fatal(err)
	}
	epoch, err := st.AdvanceEpoch(ctx, "new")
	if err != nil {
		t.Fatal(err)
	}
	expected, err := st.ForgetServedBefore(ctx, epoch, 10*time.Second, 0)
	if err != nil || len(expected) != 1 || expected[0].Name != "echo" {
		t.Fatalf("expected back with a 10 s lease: %+v %v", expected, err)
	}
	// A grace that had ended well before the previous leader went away
	// (more than a lease TTL ago) does not count.
	expected, err = st.ForgetServedBefore(ctx, epoch, time.Second, 0)
	if err != nil || len(expected) != 0 {
		t.Fatalf("expected back with a 1 s lease: %+v %v", expected, err)
	}
}

// Reproduction (scaling X6 under CI load): a leader took over expecting a
// provider back within provider_grace and lost its lease before the
// provider reconnected; the leader after it found the agent served by no
// epoch and no grace recorded, and failed its queued runs agent_offline
// though the provider came back within the first takeover's grace. The
// expectation is recorded with the agent (back_until), so the next
// takeover inside it expects the provider too; past it, or with no
// provider_grace, it does not.
func TestExpectedBackSurvivesASecondTakeover(t *testing.T) {
	ctx := context.Background()
	st := storetest.Store(t)
	storetest.Agent(t, st, testProviderKey, "echo")
	first, err := st.AdvanceEpoch(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.MarkServed(ctx, first, testProviderKey, []string{"echo"}); err != nil {
		t.Fatal(err)
	}
	second, err := st.AdvanceEpoch(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.ForgetServedBefore(ctx, second, 10*time.Second, 30*time.Second); err != nil || len(got) != 1 {
		t.Fatalf("second leader expects %+v (%v), want echo", got, err)
	}
	third, err := st.AdvanceEpoch(ctx, "third")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.ForgetServedBefore(ctx, third, 10*time.Second, 30*time.Second); err != nil || len(got) != 1 || got[0].Name != "echo" {
		t.Fatalf("third leader, inside the second's grace, expects %+v (%v), want echo", got, err)
	}
	// Once the grace (and a lease TTL) has passed, nobody expects it.
	if _, err := st.Pool().Exec(ctx, `UPDATE agents SET back_until = now() - interval '11 seconds'`); err != nil {
		t.Fatal(err)
	}
	fourth, err := st.AdvanceEpoch(ctx, "fourth")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.ForgetServedBefore(ctx, fourth, 10*time.Second, 30*time.Second); err != nil || len(got) != 0 {
		t.Fatalf("fourth leader, past the grace, expects %+v (%v), want none", got, err)
	}
}
