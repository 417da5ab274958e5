package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// Runs that pause on a question and are answered, with the provider link
// cut at seeded random moments throughout: each round's handler ran once
// (two calls per run, the second with the resume), each round's events are
// stored once in order, and the run completes.
func TestOutsideLinkCutAroundAnInterrupt(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { cutAroundInterrupt(t, seed) })
	}
}

func cutAroundInterrupt(t *testing.T, seed uint64) {
	h, proxy := cutNode(t)
	srv := aguiDoor(t, h)
	s := outsideSigner(t, 0x80+byte(seed))
	const runs, each = 3, 10
	var mu sync.Mutex
	calls := make(map[string][]bool) // run id → one entry per call: had resume
	cfg := outsideConfig(h, s, proxy.logger(h), provider.Agent{Name: "ask", Handler: func(ctx context.Context, r *provider.Run) error {
		var in struct {
			Resume json.RawMessage `json:"resume"`
		}
		_ = json.Unmarshal(r.Input, &in)
		answered := len(in.Resume) > 0 && string(in.Resume) != "null"
		mu.Lock()
		calls[r.ID] = append(calls[r.ID], answered)
		mu.Unlock()
		if err := started(ctx, r); err != nil {
			return err
		}
		round := map[bool]string{false: "ask", true: "answer"}[answered]
		for i := range each {
			if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": round, "value": i}); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
		if !answered {
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID,
				"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "q1", "reason": "confirm"}}}})
		}
		return finished(ctx, r)
	}})
	cfg.BaseURL = proxy.url()
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)

	rng := rand.New(rand.NewPCG(seed, 0xa5c))
	stopCuts := proxy.cutAtRandom(t, rng)
	ids := make([]string, runs)
	threads := make([]string, runs)
	for i := range ids {
		ids[i], threads[i] = h.Door(s.PublicKeyHex(), "ask", "", fmt.Sprint("q ", i))
	}
	url := srv.URL + "/agui/" + s.PublicKeyHex() + "/ask"
	for i, id := range ids {
		h.WaitStatus(id, run.InputRequired)
		postAGUI(t, url, fmt.Sprintf(`{"threadId":%q,"runId":"r-%d","state":{},"messages":[],"tools":[],"context":[],"forwardedProps":{},"resume":[{"interruptId":"q1","status":"resolved","payload":"yes"}]}`, threads[i], i))
	}
	for _, id := range ids {
		ended := false
		for deadline := time.Now().Add(time.Minute); !ended && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			ended = h.Run(id).Status.Terminal()
		}
		if !ended {
			r := h.Run(id)
			mu.Lock()
			c := calls[id]
			mu.Unlock()
			t.Fatalf("run %s did not end: %s (%s), last seq %d; handler calls (with a resume) %v; %d cuts, %d links registered; %s",
				id, r.Status, r.FailureReason, r.LastSeq, c, proxy.cuts.Load(), proxy.links.Load(), h.DescribeRun(id))
		}
	}
	stopCuts()
	var want []string
	for _, round := range []string{"ask", "answer"} {
		want = append(want, "RUN_STARTED<nil>")
		for i := range each {
			want = append(want, fmt.Sprint("CUSTOM", round, i))
		}
		want = append(want, "RUN_FINISHED<nil>")
	}
	for _, id := range ids {
		if r := h.Run(id); r.Status != run.Completed {
			t.Errorf("run %s: %s (%s), want completed", id, r.Status, r.FailureReason)
		}
		var got []string
		for _, e := range h.Events(id) {
			if e["type"] == "CUSTOM" {
				got = append(got, fmt.Sprint(e["type"], e["name"], e["value"]))
			} else {
				got = append(got, fmt.Sprint(e["type"], nil))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("run %s stored\n%v\nwant\n%v", id, got, want)
		}
		mu.Lock()
		if fmt.Sprint(calls[id]) != "[false true]" {
			t.Errorf("run %s: handler calls (answered?) %v, want [false true]", id, calls[id])
		}
		mu.Unlock()
	}
	if q := h.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 {
		t.Errorf("quality %+v", q)
	}
}
