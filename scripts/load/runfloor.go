package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/internal/procstack"
)

// runStoreFloor is what PostgreSQL alone does for a whole run, measured
// with funduq's own store calls on a scratch database (so no broker takes
// the runs): conc workers, each in a loop, doing a run's every storage
// step as the stack does it — the door's start (thread, run, the caller's
// message, NOTIFY), the broker's lazy offering write, the claim with the
// run's events and its end (the agent's folded message), and the door's
// reads of the stream (events then status, then the settle read). No
// HTTP, WebSocket, Redis or lane in between: runs/s of the storage path,
// the most the stack could complete on this machine's PostgreSQL.
//
// Before that, on the idle machine and one at a time, the dispatch path's
// own storage: a door's start returns (door accepted), the NOTIFY is read
// on a LISTENing connection — all a run frame waits for, now that the
// broker's offering write goes out beside it — and that lazy offering
// write returns (the offer path). Both in ms.
func runStoreFloor(ctx context.Context, adminURL string, conc, events, size int, d time.Duration) (perSec float64, op offerPath, err error) {
	perSec, notice, offer, err := runStoreFloors(ctx, adminURL, conc, events, size, d)
	if err != nil {
		return 0, offerPath{}, err
	}
	return perSec, offerPath{NoticeP50: notice.ms(0.5), NoticeP99: notice.ms(0.99), OfferP50: offer.ms(0.5), OfferP99: offer.ms(0.99)}, nil
}

// offerPath is offerFloor's figures, in ms.
type offerPath struct{ NoticeP50, NoticeP99, OfferP50, OfferP99 float64 }

func runStoreFloors(ctx context.Context, adminURL string, conc, events, size int, d time.Duration) (float64, *hist, *hist, error) {
	db, err := procstack.CreateDatabase(ctx, adminURL, fmt.Sprintf("funduq_load_floor_%d_%s", os.Getpid(), randHex(3)))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("run store floor: %w", err)
	}
	defer db.Drop(context.Background()) //nolint:errcheck // best effort
	st, err := store.Open(ctx, db.URL, store.Options{MaxConns: int32(conc)})
	if err != nil {
		return 0, nil, nil, err
	}
	defer st.Close()
	epoch, err := st.AdvanceEpoch(ctx, "load-floor")
	if err != nil {
		return 0, nil, nil, err
	}
	key := randHex(32)
	if err := st.RegisterAgents(ctx, epoch, store.Provider{PublicKey: key, Fingerprint: key[:16]},
		[]store.Agent{{ProviderKey: key, Name: "floor"}}); err != nil {
		return 0, nil, nil, err
	}
	pad := strings.Repeat("x", size)
	oneRun := func() error {
		runID, threadID := run.NewRunID(), run.NewThreadID()
		msg := json.RawMessage(fmt.Sprintf(`{"id":%q,"role":"user","content":"t0=0"}`, run.NewMessageID()))
		input, _ := json.Marshal(map[string]any{"threadId": threadID, "runId": runID, "messages": []json.RawMessage{msg},
			"tools": []any{}, "context": []any{}, "state": map[string]any{}, "forwardedProps": map[string]any{}})
		if _, _, err := st.CreateRun(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: key, AgentName: "floor",
			CreateThread: &store.NewThread{}, RunInput: input, Messages: []store.Message{{MessageID: run.NewMessageID(), Message: msg}}}); err != nil {
			return err
		}
		if _, err := st.Transition(ctx, store.Move{RunID: runID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch, Lazy: true}); err != nil {
			return err
		}
		evs := make([]store.NewEvent, 0, events)
		for i := range events {
			ev := fmt.Sprintf(`{"type":"CUSTOM","name":"load","value":{"t":%d,"pad":%q}}`, i, pad)
			switch i {
			case 0:
				ev = fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID)
			case events - 1:
				ev = fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, threadID, runID)
			}
			p := int64(i + 1)
			evs = append(evs, store.NewEvent{Event: json.RawMessage(ev), ProviderSeq: &p})
		}
		if _, _, err := st.Conclude(ctx, store.Conclusion{Claim: true, ProviderEvents: evs,
			Move:          store.Move{RunID: runID, To: run.Completed, Writer: run.ByBroker, Epoch: epoch},
			AgentMessages: []store.Message{{MessageID: run.NewMessageID(), Message: json.RawMessage(`{"role":"assistant","content":"ok"}`)}}}); err != nil {
			return err
		}
		if _, _, err := st.EventsAndRun(ctx, runID, 0, 500); err != nil {
			return err
		}
		_, err := st.GetRun(ctx, runID)
		return err
	}
	notice, offer, err := offerFloor(ctx, st, db.URL, key, epoch, min(d, 3*time.Second))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("run store floor: offer path: %w", err)
	}
	var n atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for time.Now().Before(stop) && ctx.Err() == nil {
				if err := oneRun(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	if e, ok := firstErr.Load().(error); ok {
		return 0, nil, nil, fmt.Errorf("run store floor: %w", e)
	}
	return float64(n.Load()) / time.Since(start).Seconds(), notice, offer, nil
}

// offerFloor times, one run at a time, a door's start returning → its
// NOTIFY read by a LISTENing connection (notice) → the lazy offering write
// returned (offer), with funduq's store calls.
func offerFloor(ctx context.Context, st *store.Store, dbURL, key string, epoch int64, d time.Duration) (notice, offer *hist, err error) {
	lc, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, nil, err
	}
	defer lc.Close(context.Background())
	if _, err := lc.Exec(ctx, "LISTEN "+store.ChannelRunQueued); err != nil {
		return nil, nil, err
	}
	notice, offer = &hist{}, &hist{}
	stop := time.Now().Add(d)
	for i := 0; time.Now().Before(stop) && i < 3000; i++ {
		runID, threadID := run.NewRunID(), run.NewThreadID()
		input, _ := json.Marshal(map[string]any{"threadId": threadID, "runId": runID, "messages": []any{}})
		if _, _, err := st.CreateRun(ctx, store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: key, AgentName: "floor",
			CreateThread: &store.NewThread{}, RunInput: input}); err != nil {
			return nil, nil, err
		}
		accepted := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		for {
			nf, err := lc.WaitForNotification(wctx)
			if err != nil {
				cancel()
				return nil, nil, err
			}
			if id, _, _ := store.ParseQueuedPayload(nf.Payload); id == runID {
				break
			}
		}
		cancel()
		notice.add(time.Since(accepted))
		if _, err := st.Transition(ctx, store.Move{RunID: runID, To: run.Offering, Writer: run.ByBroker, Epoch: epoch, Lazy: true}); err != nil {
			return nil, nil, err
		}
		offer.add(time.Since(accepted))
	}
	return notice, offer, nil
}
