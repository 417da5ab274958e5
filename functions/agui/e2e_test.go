package agui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/internal/nodejs"
	"github.com/funduq/funduq-go/internal/syncbuf"
	"github.com/funduq/funduq-go/provider"
)

// e2eAgents is the Go provider SDK side the official client talks to: echo
// answers, slow holds its turn until release is closed (one turn per
// thread: SerializePerThread). The pausing agent is scripted on the wire
// (see askOnTheWire) because the SDK's provider seq restarts at 1 when a
// reopened run is delivered again, and the broker drops those events as
// resends — a core bug reported with this door, pinned by
// TestResumeWithSDKProvider.
func e2eAgents(release <-chan struct{}) []provider.Agent {
	started := func(ctx context.Context, r *provider.Run) error {
		return r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID})
	}
	finished := func(ctx context.Context, r *provider.Run, outcome any) error {
		ev := map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID}
		if outcome != nil {
			ev["outcome"] = outcome
		}
		return r.Emit(ctx, ev)
	}
	return []provider.Agent{
		{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
			if err := started(ctx, r); err != nil {
				return err
			}
			if err := r.EmitText(ctx, r.ID+"-reply", "echo: "+r.LastUserText()); err != nil {
				return err
			}
			return finished(ctx, r, nil)
		}},
		{Name: "slow", Handler: func(ctx context.Context, r *provider.Run) error {
			if err := started(ctx, r); err != nil {
				return err
			}
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := r.EmitText(ctx, r.ID+"-reply", "slow: "+r.LastUserText()); err != nil {
				return err
			}
			return finished(ctx, r, nil)
		}},
	}
}

// askOnTheWire answers the client's "ask" turn: the first delivery pauses on
// an interrupt; the answer reopens the same run, delivered again with the
// resume, and is answered.
func askOnTheWire(t *testing.T, p *nodetest.Prov) {
	t.Helper()
	f := p.Offer()
	p.Accept(f.RunID)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"approve-1","reason":"approval","message":"May I?"}]}}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	f2 := p.Offer()
	var in struct {
		ParentRunID string            `json:"parentRunId"`
		Resume      []json.RawMessage `json:"resume"`
	}
	if err := json.Unmarshal(f2.RunInput, &in); err != nil || f2.RunID != f.RunID || in.ParentRunID != f.RunID || len(in.Resume) != 1 {
		t.Fatalf("the answer's delivery: %v %s", err, f2.RunInput)
	}
	p.Accept(f2.RunID)
	p.Event(f2.RunID, runStartedFor(f))
	p.Event(f2.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"answer-1","role":"assistant"}`)
	p.Event(f2.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"answer-1","delta":"approved"}`)
	p.Event(f2.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"answer-1"}`)
	p.Event(f2.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f2.RunID)
}

// TestResumeWithSDKProvider: the Go provider SDK numbers a delivery's
// events from seq 1; when a paused run is reopened (same run id, D1) and
// delivered again, its second round must be stored whole — provider seqs
// identify resends within a round only (runs.round_seq).
func TestResumeWithSDKProvider(t *testing.T) {
	h := nodetest.Start(t, nil)
	signer := signer(t, 0xe3)
	client, err := provider.New(provider.Config{BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Agents: []provider.Agent{{Name: "ask", Handler: func(ctx context.Context, r *provider.Run) error {
			var in struct {
				Resume []json.RawMessage `json:"resume"`
			}
			_ = json.Unmarshal(r.Input, &in)
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			fin := map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID}
			if len(in.Resume) == 0 {
				fin["outcome"] = map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "i1", "reason": "r"}}}
			} else if err := r.EmitText(ctx, "answer", "approved"); err != nil {
				return err
			}
			return r.Emit(ctx, fin)
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = client.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	<-client.Ready()
	srv := startDoor(t, h, nil)
	first := events(openStream(t, "POST", aguiURL(srv, signer.PublicKeyHex(), "ask"), input("t", "r1", ""), nil).rest())
	thread := first[0].event(t)["threadId"].(string)
	body := fmt.Sprintf(`{"threadId":%q,"runId":"r2","messages":[],"resume":[{"interruptId":"i1","status":"resolved"}]}`, thread)
	fs := openStream(t, "POST", aguiURL(srv, signer.PublicKeyHex(), "ask"), body, nil).rest()
	if got := typesOf(t, fs); len(got) != 5 || idsOf(fs)[0] != "3" {
		t.Fatalf("resumed round %v ids %v: the provider's first events were dropped", got, idsOf(fs))
	}
}

// The acceptance test with the official AG-UI TypeScript client
// (@ag-ui/client HttpAgent, its default event verification on): a full
// turn, a reconnect with Last-Event-ID, an offline agent, an interrupt and
// its resume, and a queued second run — against a real broker node and the
// door on loopback, served by the Go provider SDK.
func TestAGUIClientEndToEnd(t *testing.T) {
	node, dir := nodejs.Project(t, "e2e", "@ag-ui/client")

	h := nodetest.Start(t, nil)
	gone := h.Connect(0xe9, nil)
	gone.Register("gone")
	gone.Close()
	asker := h.Connect(0xe2, nil)
	asker.Register("ask")

	release := make(chan struct{})
	signer := signer(t, 0xe1)
	client, err := provider.New(provider.Config{BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Agents: e2eAgents(release), SerializePerThread: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := client.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("provider: %v", err)
		}
	})
	// Release the slow agent once its thread holds two runs: the second
	// was accepted while the first is still being worked on.
	wg.Go(func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var n int
			err := h.Store.Pool().QueryRow(ctx, `SELECT count(*) FROM runs WHERE agent_name = 'slow'
				AND status IN ('running', 'completed')`).Scan(&n)
			if err == nil && n >= 2 {
				close(release)
				return
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-client.Ready():
	case <-time.After(guard):
		t.Fatal("the provider did not register")
	}
	h.Eventually("gone is unserved", func() bool {
		as, err := h.Store.ListAgents(context.Background())
		if err != nil {
			return false
		}
		for _, a := range as {
			if a.Name == "gone" {
				return !a.Online
			}
		}
		return false
	})
	srv := startDoor(t, h, nil)

	runCtx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	cmd := exec.CommandContext(runCtx, node, "run.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FUNDUQ_DOOR="+srv.URL, "FUNDUQ_PROVIDER="+signer.PublicKeyHex(),
		"FUNDUQ_OFFLINE="+gone.Key, "FUNDUQ_ASKER="+asker.Key, "NODE_ENV=test")
	var stdout, stderr syncbuf.Buffer // read on failure while the process may still write
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node stdout:\n%s\nnode stderr:\n%s", stdout.String(), stderr.String())
		}
	})
	askOnTheWire(t, asker)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node run.mjs: %v", err)
	}
	t.Logf("client report: %s", stdout.String())
	var rep struct {
		FullTurn struct{ ThreadID, RunID string }
		Offline  struct{ RunID string }
		Resume   struct{ RunID, ThreadID string }
		Queued   struct{ ThreadID, First, Second string }
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", stdout.String(), err)
	}
	// The record agrees with what the client saw.
	h.WaitStatus(rep.FullTurn.RunID, run.Completed)
	if r := h.WaitStatus(rep.Offline.RunID, run.Failed); r.FailureReason != string(run.ReasonAgentOffline) {
		t.Errorf("offline run %+v", r)
	}
	if r := h.WaitStatus(rep.Resume.RunID, run.Completed); r.ThreadID != rep.Resume.ThreadID {
		t.Errorf("resumed run %+v", r)
	}
	first, second := h.WaitStatus(rep.Queued.First, run.Completed), h.WaitStatus(rep.Queued.Second, run.Completed)
	if first.ThreadID != rep.Queued.ThreadID || second.ThreadID != rep.Queued.ThreadID || !first.CreatedAt.Before(second.CreatedAt) {
		t.Errorf("queued runs %+v %+v", first, second)
	}
}
