package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
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

// A provider that goes away with the leader (its host died too) never
// re-adopts its runs: each one it held must end once the new leader's
// provider_grace has run out (D7: orphaned_by_funduq_restart, with a
// terminal RUN_ERROR), whichever way the leader went, and its callers'
// streams must end with that error. Nothing stays running.
func TestHeldRunsEndWhenTheProviderGoesWithTheLeader(t *testing.T) {
	for _, kind := range []string{"cut", "freeze", "handover"} {
		t.Run(kind, func(t *testing.T) {
			a, b, lb, doors, env := chaosPair(t, nil)
			s, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(0x6e))
			raw := &rawProv{signer: s, base: lb, funduqKey: a.h.Node.FunduqKey(), agent: "raw", ackMode: "prompt",
				burst: 1, gap: 50 * time.Millisecond, events: 1000, runs: map[string]*rawRun{}, offers: map[string]int{}}
			raw.cond = sync.NewCond(&raw.mu)
			raw.start()
			defer raw.close()
			a.h.Eventually("the raw provider is registered", func() bool {
				raw.mu.Lock()
				defer raw.mu.Unlock()
				return raw.cur != nil
			})

			callers := make([]*chaosCaller, 3)
			var wg sync.WaitGroup
			for i := range callers {
				c := &chaosCaller{n: i + 1, agent: "raw", door: i % 2}
				callers[i] = c
				wg.Add(1)
				go func() { defer wg.Done(); c.follow(doors, s.PublicKeyHex()) }()
			}
			until(chaosGuard, func() bool {
				raw.mu.Lock()
				defer raw.mu.Unlock()
				if len(raw.runs) < len(callers) {
					return false
				}
				for id := range raw.runs {
					if evs, _ := a.h.Store.EventsAfter(context.Background(), id, 0, 10); len(evs) < 2 {
						return false
					}
				}
				return true
			})
			// The provider's host dies: its link drops, it never returns.
			if testing.Verbose() {
				raw.mu.Lock()
				t.Logf("raw provider holds %d runs over %d links", len(raw.runs), raw.links)
				raw.mu.Unlock()
			}
			raw.close()
			switch kind {
			case "cut":
				a.cut()
			case "freeze":
				a.freeze()
				defer a.thaw()
			case "handover":
				var out, errb bytes.Buffer
				if code := run([]string{"lease", "handover", "--wait", "15s"}, env, &out, &errb); code != 0 {
					t.Fatalf("lease handover: exit %d: %s %s", code, out.String(), errb.String())
				}
			}
			leaderEpoch(t, b.h)
			b.h.Settle()
			b.h.Advance(chaosGrace + time.Second)
			wg.Wait()
			for _, c := range callers {
				if c.id == "" {
					t.Fatalf("run #%d was not started: %v", c.n, c.err)
				}
				r, err := b.h.Store.GetRun(context.Background(), c.id)
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != runstatus.Failed || r.FailureReason != string(runstatus.ReasonOrphanedByRestart) {
					t.Errorf("run #%d %s: %s/%s, want failed/%s once the grace ran out", c.n, c.id, r.Status, r.FailureReason, runstatus.ReasonOrphanedByRestart)
				}
				if c.err != nil {
					t.Errorf("run #%d: the caller's stream: %v", c.n, c.err)
				} else if n := len(c.events); n == 0 || !strings.Contains(c.events[n-1].data, `"RUN_ERROR"`) {
					t.Errorf("run #%d: the caller's stream did not end with a RUN_ERROR: %v", c.n, c.events)
				}
			}
		})
	}
}
