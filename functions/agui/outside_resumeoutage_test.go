package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/internal/pgwatch"
	"github.com/funduq/funduq-go/internal/testservers"
)

// A stream that must read the record before it can send anything — a
// resume's opening read (what is open at its Last-Event-ID), or the first
// read of a run whose live feed is gone (ended over FinishedTTL ago) —
// while the door's PostgreSQL is unreachable, cut (connections closed,
// new ones refused) or hung (frozen) at that read, ends typed once the
// record has stayed out of reach for door.StorageGiveUp: its RUN_STARTED,
// then funduq.stream_ended with reason storage_unavailable naming the
// Last-Event-ID to resume from (design.md §Doors under storage faults;
// D13 "fail fast"). It used to retry until the stream's budget — the
// Lambda deadline less its margin, or never on the local server — with
// keep-alives alone. The stream's budget here is far longer than the give
// up, so an end on the budget (reason stream_ended) is the defect; and the
// test's hang detector (slowGuard) longer than the budget, so that the
// defect says so, and a starved machine, slow to reach the give-up, is
// not taken for it.
func TestOutsideStreamWhoseFirstReadMeetsAnOutageEndsTyped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		last   string // Last-Event-ID; "" none
		expire bool   // the run's live feed is gone
		freeze bool   // hung, else cut
	}{
		{"resume inside a message, cut", "3", false, false},
		{"resume inside a message, hung", "3", false, true},
		{"an old run's events, cut", "", true, false},
		{"an old run resumed after a step, cut", "7", true, false},
		{"an old run's events, hung", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			deps := mustDeps(t, h, "")
			deps.Store.Close()
			var w *pgwatch.Watch
			var px *testservers.Proxy
			deps.Store, w, px = pgwatch.OpenStore(t, h.Cfg.Storage.DatabaseURL, 4)
			srv := startDoorWith(t, deps, func(o *agui.Options) { o.StreamBudget = slowGuard / 2 })
			s, f := takenRunWithin(t, slowGuard, p, srv)
			p.Event(f.RunID, runStartedFor(f))
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"one"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"two"}`)
			p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
			p.Event(f.RunID, `{"type":"STEP_STARTED","stepName":"s"}`)
			p.Event(f.RunID, `{"type":"STEP_FINISHED","stepName":"s"}`)
			p.Complete(f.RunID, *f.ThreadID)
			s.rest()
			h.WaitStatus(f.RunID, run.Completed)
			if tc.expire {
				rdb := redis.NewClient(mustRedisOpts(t, h.Cfg.RedisURL))
				defer rdb.Close()
				if err := rdb.Del(context.Background(), h.Prefix+"run:"+f.RunID+":events").Err(); err != nil {
					t.Fatal(err)
				}
			}

			var once sync.Once
			cut := make(chan struct{})
			w.OnStart(func(sql string) {
				if strings.Contains(sql, "FROM run_events") {
					once.Do(func() {
						if tc.freeze {
							px.Freeze()
						} else {
							px.Close()
						}
						close(cut)
					})
				}
			})
			hdr := map[string]string{}
			if tc.last != "" {
				hdr[agui.LastEventIDHeader] = tc.last
			}
			fs := events(openStreamWithin(t, slowGuard, "GET", srv.URL+"/runs/"+f.RunID+"/events", "", hdr).rest())
			<-cut
			if len(fs) != 2 || typesOf(t, fs)[0] != "RUN_STARTED" {
				t.Fatalf("stream with its first read cut: %+v", fs)
			}
			var end struct {
				Type  string            `json:"type"`
				Name  string            `json:"name"`
				Value map[string]string `json:"value"`
			}
			if err := json.Unmarshal([]byte(fs[1].Data), &end); err != nil {
				t.Fatal(err)
			}
			want := tc.last
			if want == "" {
				want = "0"
			}
			if fs[1].ID != "" || end.Name != agui.StreamEndedEvent || end.Value["reason"] != "storage_unavailable" ||
				end.Value["lastEventId"] != want || end.Value["runId"] != f.RunID {
				t.Fatalf("the stream ended with %s (id %q); want %s, reason storage_unavailable, lastEventId %s",
					fs[1].Data, fs[1].ID, agui.StreamEndedEvent, want)
			}
		})
	}
}

func mustRedisOpts(t *testing.T, url string) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(fmt.Errorf("redis url: %w", err))
	}
	return o
}

// A resume whose opening read waits (here behind a lock on the record)
// has its response's headers sent at once, before that read: the client
// sees its 200 text/event-stream and then the stream, not nothing at all
// until the first keep-alive (the heartbeat, 15 s by default), which
// reads as a door that does not answer.
func TestOutsideResumeSendsItsHeadersBeforeItsOpeningRead(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, func(o *agui.Options) {
		o.Heartbeat = time.Hour
		o.StorageGiveUp = time.Hour
	})
	s, f := takenRun(t, p, srv)
	p.Event(f.RunID, runStartedFor(f))
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_START","messageId":"a1","role":"assistant"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"a1","delta":"one"}`)
	p.Event(f.RunID, `{"type":"TEXT_MESSAGE_END","messageId":"a1"}`)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, *f.ThreadID, f.RunID))
	p.Finish(f.RunID)
	s.rest()
	h.WaitStatus(f.RunID, run.Completed)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, h.Cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE run_events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	// openStream returns on the response's headers; the lock is held
	// until it has.
	r := openStream(t, "GET", srv.URL+"/runs/"+f.RunID+"/events", "", map[string]string{agui.LastEventIDHeader: "2"})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := typesOf(t, r.rest()); !slices.Equal(got, []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "RUN_FINISHED"}) {
		t.Fatalf("the resume after the lock: %v", got)
	}
}

// A request whose storage connection is cut under its query (the socket
// closed with no message from PostgreSQL: a backend killed, a proxy or
// route cut, a failover) is answered 503 storage_unavailable with
// Retry-After, as one whose backend was terminated (design.md §Doors under
// storage faults): pgx reports only "unexpected EOF", which the door took
// for its own failure and answered 500 internal_error.
func TestOutsideRequestWhoseConnectionIsCutIsStorageTrouble(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv, w, px := watchedDoor(t, h)
	thread := doneThread(t, h, p, aguiURL(srv, p.Key, "echo"))
	var once sync.Once
	w.OnStart(func(sql string) {
		if strings.Contains(sql, "FROM thread_messages") {
			once.Do(px.Close)
		}
	})
	status, hdr, m := jsonCall(t, "GET", srv.URL+"/threads/"+thread, "", nil)
	if status != 503 || hdr.Get("Retry-After") == "" || errCode(m) != "storage_unavailable" {
		t.Fatalf("GET /threads with its connection cut: %d Retry-After %q %v; want 503 storage_unavailable", status, hdr.Get("Retry-After"), m)
	}
}
