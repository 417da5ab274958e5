package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// loseAnswerOnce makes the first write named op… commit in PostgreSQL and
// then lose its answer (the connection closed after COMMIT), as a network
// failure at that moment would; fired reports whether it has.
func loseAnswerOnce(h *nodetest.Harness, op string) (fired func() bool) {
	var done atomic.Bool
	h.Store.InjectFaults(&store.Faults{AfterCommit: func(what string) error {
		if strings.HasPrefix(what, op) && done.CompareAndSwap(false, true) {
			return errors.New("seeded fault: the commit's answer was lost")
		}
		return nil
	}})
	return done.Load
}

// Issue #21, deliverable 6: a retried event write whose first attempt
// committed (its answer lost with the connection) stores the events once,
// although they carry no provider seq to dedupe them by: the retry carries
// the write's key and finds its own commit.
func TestRetriedEventWriteStoresOnce(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe8, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	fired := loseAnswerOnce(h, "append events")
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("the write committed and lost its answer", fired)
	h.Eventually("the event is stored", func() bool { return len(h.Events(id)) > 0 })
	h.Settle()
	h.Store.InjectFaults(nil)
	p.Event(id, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(id, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	p.Finish(id)
	h.WaitStatus(id, run.Completed)
	var types []string
	for _, ev := range h.Events(id) {
		types = append(types, fmt.Sprint(ev["type"]))
	}
	if want := "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_END RUN_FINISHED"; strings.Join(types, " ") != want {
		t.Fatalf("stored %v, want %s", types, want)
	}
}

// The same for a run's end stored with its last events: the retried
// conclusion finds its own commit, so neither the events nor anything
// after the terminal event is stored again.
func TestRetriedConclusionStoresOnce(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe9, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)
	fired := loseAnswerOnce(h, "conclude run")
	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
	p.Finish(id)
	h.WaitStatus(id, run.Completed)
	h.Eventually("the conclusion committed and lost its answer", fired)
	h.Settle()
	h.Store.InjectFaults(nil)
	var types []string
	for _, ev := range h.Events(id) {
		types = append(types, fmt.Sprint(ev["type"]))
	}
	if want := "RUN_STARTED RUN_FINISHED"; strings.Join(types, " ") != want {
		t.Fatalf("stored %v, want %s", types, want)
	}
	if q := h.Quality(p.Key); q.Misdeclared+q.Abandoned+q.Unanswered+q.AnsweredLate+q.Undelivered != 0 {
		t.Fatalf("counted %+v", q)
	}
}

// Issue #21, deliverable 6: the leader's retries of a write PostgreSQL
// keeps failing are bounded (backoff with jitter up to a ceiling, for at
// most FUNDUQ_STORE_RETRY_FOR). Then it fails clearly: it steps down,
// closing its links with the reason and counting the failure, and leads
// again once the database answers — the run read back and carried on by
// its provider. The fault is PostgreSQL's own: the database refuses
// connections and its backends are terminated.
func TestLeaderStepsDownWhenWritesCannotLand(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) {
		c.StoreRetryFor = 500 * time.Millisecond
		c.ProviderGrace = 30 * time.Second
	})
	p := h.Connect(0xea, nil)
	p.Register("echo")
	id, thread := h.Door(p.Key, "echo", "", "hi")
	p.Offer()
	p.Accept(id)
	h.WaitStatus(id, run.Running)

	u, err := url.Parse(h.Cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	db := pgx.Identifier{strings.TrimPrefix(u.Path, "/")}.Sanitize()
	admin, err := pgx.Connect(context.Background(), storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) }) // after restore: cleanups run last first
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(context.Background(), sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`ALTER DATABASE ` + db + ` ALLOW_CONNECTIONS false`)
	restored := false
	restore := func() {
		if !restored {
			restored = true
			exec(`ALTER DATABASE ` + db + ` ALLOW_CONNECTIONS true`)
		}
	}
	t.Cleanup(restore)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`,
		strings.TrimPrefix(u.Path, "/"))

	p.Event(id, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id))
	h.Eventually("the leader steps down and closes the link", func() bool { closed, _ := p.Closed(); return closed })
	_, cerr := p.Closed()
	if ce, ok := cerr.(*websocket.CloseError); !ok || !strings.Contains(ce.Text, "database") {
		t.Fatalf("link closed with %v, want the reason", cerr)
	}
	if m := metrics(t, h); !strings.Contains(m, "\nfunduq_broker_store_write_failures_total 1\n") {
		t.Fatalf("metric: %q", grepLines(m, "funduq_broker_store_write_failures_total"))
	}
	restore()
	h.Eventually("the node leads again", h.Ready)
	p2 := h.Connect(0xea, nil)
	p2.Register("echo")
	p2.Complete(id, thread) // its provider carries on: a report re-adopts the run (D7)
	h.WaitStatus(id, run.Completed)
	if n := len(h.Events(id)); n != 5 {
		t.Fatalf("%d events stored, want 5", n)
	}
}
