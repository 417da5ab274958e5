package a2a_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A run that ends between a stream's admission and its opening snapshot
// (a fast agent) streams as a slower one would: its reply is not in the
// snapshot's history and then streamed in again as artifact updates, and
// one completed status ends the stream.
func TestStreamOpeningAsItsRunEnds(t *testing.T) {
	for _, v := range []string{"0.3", "1.0"} {
		t.Run(v, func(t *testing.T) {
			const reply = "pong-from-a-fast-agent"
			items := streamWhileItEnds(t, v, func(runID, threadID string) []string {
				return []string{runStarted(threadID, runID),
					`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
					fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":%q}`, reply),
					`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
					runFinished(threadID, runID)}
			})
			inHistory := strings.Contains(strings.Join(historyTexts(items[0].obj), "\n"), reply)
			streamed, finals := 0, 0
			for _, it := range items[1:] {
				switch it.kind {
				case "artifact-update":
					if strings.Contains(fmt.Sprint(it.obj["artifact"]), reply) {
						streamed++
					}
				case "status-update":
					if st := stateOf(it.obj); st == wireState(v, "completed") {
						finals++
					}
				}
			}
			if inHistory && streamed > 0 {
				t.Errorf("the reply is in the snapshot's history and streamed in again %d time(s)", streamed)
			}
			if !inHistory && streamed == 0 && !strings.Contains(fmt.Sprint(items[0].obj["artifacts"]), reply) {
				t.Errorf("the reply is nowhere in the stream")
			}
			if finals != 1 {
				t.Errorf("%d completed statuses, want 1", finals)
			}
		})
	}
}

// A status update's timestamp never goes back: a stream whose round ends
// before its events are relayed (as above, so the door relays them after
// the record settled) still ends on a final status no earlier than the
// working updates before it, and those do not go back either.
func TestStreamStatusTimesNeverGoBack(t *testing.T) {
	for _, v := range []string{"0.3", "1.0"} {
		t.Run(v, func(t *testing.T) {
			items := streamWhileItEnds(t, v, func(runID, threadID string) []string {
				return []string{runStarted(threadID, runID),
					`{"type":"STEP_STARTED","stepName":"think"}`,
					`{"type":"STEP_FINISHED","stepName":"think"}`,
					runFinished(threadID, runID)}
			})
			var last time.Time
			statuses := 0
			for i, it := range items {
				if it.kind != "status-update" {
					continue
				}
				statuses++
				st, _ := it.obj["status"].(map[string]any)
				raw, _ := st["timestamp"].(string)
				ts, err := time.Parse(time.RFC3339Nano, raw)
				if err != nil {
					t.Fatalf("item %d: status timestamp %q: %v", i, raw, err)
				}
				if ts.Before(last) {
					t.Errorf("item %d (%s): timestamp %s is before the previous status's %s",
						i, stateOf(it.obj), raw, last.Format(time.RFC3339Nano))
				}
				last = ts
			}
			if statuses < 3 {
				t.Fatalf("%d status updates, want the working ones and a final: %v", statuses, items)
			}
		})
	}
}

// streamWhileItEnds opens a message/stream on a door whose stream waits at
// its opening snapshot until the run it started has settled, the provider
// playing script; it returns the stream's items.
func streamWhileItEnds(t *testing.T, v string, script func(runID, threadID string) []string) []item {
	t.Helper()
	h := nodetest.Start(t, nil)
	p := h.Connect(0x5a, nil)
	p.Register("echo")
	ended := make(chan struct{})
	var once sync.Once
	srv := startDoor(t, h, func(o *a2a.Options) {
		a2a.BeforeSnapshot(o, func() {
			once.Do(func() {
				select {
				case <-ended:
				case <-time.After(guard):
				}
			})
		})
	})
	played := playNext(p, script)
	go func() {
		// The run ends, record and all, while the stream waits at its
		// snapshot: the barrier is the stored status.
		f := <-played
		deadline := time.Now().Add(guard)
		for h.Run(f.RunID).Status != "completed" && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		close(ended)
	}()
	c := newClient(t, srv, p.Key, "echo", v)
	s := c.stream(c.body(methodOf(v, "message/stream"), map[string]any{"message": c.message("u1", "ping", nil)}), nil)
	items := normItems(t, v, s.rest())
	if len(items) == 0 || items[0].kind != "task" {
		t.Fatalf("stream does not open with a task: %v", items)
	}
	return items
}
