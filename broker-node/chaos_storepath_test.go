package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	runstatus "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// echoSDK runs our SDK serving agent "echo" through the balancer until the
// test ends.
func echoSDK(t *testing.T, lb, funduqKey string, seed byte) *identity.Signer {
	t.Helper()
	s, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	client, err := provider.New(provider.Config{
		BaseURL: lb, Signer: s, FunduqKey: funduqKey,
		Backoff:      provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		PingInterval: 200 * time.Millisecond, Logger: testLog(),
		Agents: []provider.Agent{{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
			for _, ev := range sdkScript(r.ThreadID, r.ID, 1) {
				if err := r.Emit(ctx, json.RawMessage(ev)); err != nil {
					return err
				}
			}
			return nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = client.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-client.Ready()
	return s
}

// A node that cannot reach PostgreSQL must not keep the lease from one that
// can (design.md D10, D13; "Failure, component by component": a write that
// cannot land within store_retry_for makes the leader step down, and the
// next takeover reads the runs back). Each case leaves one node whose
// database path is cut and a healthy one; a run a caller starts then must
// complete, and `lease status` must name the node that leads.
func TestLeaseGoesToTheNodeThatReachesTheDatabase(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cut takes a node's database away and returns the node that can
		// still lead.
		cut func(t *testing.T, a, b *chaosNode, env map[string]string) *chaosNode
	}{
		{"the leader's database path goes", func(t *testing.T, a, b *chaosNode, _ map[string]string) *chaosNode {
			a.pg.cutAll()
			return b
		}},
		{"handed over to a standby without its database", func(t *testing.T, a, b *chaosNode, env map[string]string) *chaosNode {
			b.pg.cutAll()
			var out, errb bytes.Buffer
			// The handover's own wait may end without a new epoch; what
			// the operator needs is a leader afterwards, checked below.
			run([]string{"lease", "handover", "--wait", "3s"}, env, &out, &errb)
			t.Logf("lease handover: %s %s", strings.TrimSpace(out.String()), strings.TrimSpace(errb.String()))
			return a
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, lb, doors, env := chaosPair(t, func(c *config.Broker) { c.StoreRetryFor = time.Second })
			first := leaderEpoch(t, a.h)
			sdk := echoSDK(t, lb, a.h.Node.FunduqKey(), 0x5d)
			want := tc.cut(t, a, b, env)

			c := &chaosCaller{n: 1, agent: "echo"}
			c.follow(doors, sdk.PublicKeyHex())
			if c.err != nil {
				var out, errb bytes.Buffer
				run([]string{"lease", "status"}, env, &out, &errb)
				al, _ := a.h.Node.Broker.Leading()
				bl, _ := b.h.Node.Broker.Leading()
				t.Fatalf("the caller's stream: %v (saw %d events); node-a leading %v, node-b leading %v; lease status says:\n%s", c.err, len(c.events), al, bl, out.String())
			}
			r, err := want.h.Store.GetRun(context.Background(), c.id)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != runstatus.Completed {
				t.Errorf("the run is %s/%s, want completed by %s", r.Status, r.FailureReason, want.id)
			}
			epoch := leaderEpoch(t, want.h)
			var out, errb bytes.Buffer
			run([]string{"lease", "status", "--json"}, env, &out, &errb)
			var ls leaseStatus
			if err := json.Unmarshal(out.Bytes(), &ls); err != nil || !ls.Leading || ls.Node != want.id || ls.Epoch != epoch || epoch <= first {
				t.Errorf("lease status: %s (%v); want %s leading under epoch %d (after %d)", strings.TrimSpace(out.String()), err, want.id, epoch, first)
			}
		})
	}
}

// While the node holding the lease has not taken an epoch (it cannot reach
// PostgreSQL yet), nobody leads: the previous leader fenced itself and the
// holder writes nothing (D10). `lease status` must not name the holder as
// leader under the previous leader's epoch; it says who holds the lease,
// whose the epoch is, and that nobody leads.
func TestLeaseStatusWhileTheHolderHasNoEpoch(t *testing.T) {
	a, b, _, _, env := chaosPair(t, func(c *config.Broker) { c.StoreRetryFor = time.Minute })
	first := leaderEpoch(t, a.h)
	b.pg.cutAll()
	var out, errb bytes.Buffer
	// The wait ends without a new epoch: node-b holds the lease, stuck.
	run([]string{"lease", "handover", "--wait", "1s"}, env, &out, &errb)
	var ls leaseStatus
	until(chaosGuard, func() bool {
		out.Reset()
		run([]string{"lease", "status", "--json"}, env, &out, &errb)
		return json.Unmarshal(out.Bytes(), &ls) == nil && ls.Node == b.id
	})
	if ls.Node != b.id {
		t.Fatalf("node-b never held the lease: %s", out.String())
	}
	var fields map[string]any
	_ = json.Unmarshal(out.Bytes(), &fields)
	if ls.Leading || ls.Epoch != first || fields["epochNode"] != a.id || ls.AdvertiseURL != "" {
		t.Errorf("lease status --json while node-b holds the lease without an epoch: %s; want leading false, epoch %d of %s", strings.TrimSpace(out.String()), first, a.id)
	}
	out.Reset()
	run([]string{"lease", "status"}, env, &out, &errb)
	if text := out.String(); strings.Contains(text, "leader:    node-b") || !strings.Contains(text, "nobody leads") || !strings.Contains(text, "node-b") {
		t.Errorf("lease status while node-b holds the lease without an epoch:\n%s", text)
	}
	// Once node-b reaches its database it takes the epoch and leads.
	b.pg.restore()
	epoch := leaderEpoch(t, b.h)
	out.Reset()
	run([]string{"lease", "status", "--json"}, env, &out, &errb)
	fields = nil
	if err := json.Unmarshal(out.Bytes(), &ls); err != nil || json.Unmarshal(out.Bytes(), &fields) != nil || !ls.Leading || ls.Node != b.id ||
		ls.Epoch != epoch || fields["epochNode"] != nil {
		t.Errorf("lease status once node-b leads: %s (%v)", strings.TrimSpace(out.String()), err)
	}
}
