package kyok_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/functions/door"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
	"github.com/funduq/funduq-go/internal/pgwatch"
)

// A KYOK call whose checks meet a hung PostgreSQL (connections open and
// pooled, never answered again) is answered 503 unavailable with
// Retry-After when the bound of the one step that met it expires (D13,
// design.md §Doors under storage faults), whichever check it is: the
// run's read, the agent's after it, the offering's last. Each has its own
// door.StorageTimeout. Before, the checks ran on the caller's context
// alone, and a call waited as long as its caller did. Not timed: every
// storage call made for the call had a deadline at most one bound after
// it started, and the call was answered (within guard, a hang detector)
// with one storage call alone ended by its deadline, the frozen one.
func TestOutsideCallMeetingAHungStorageWaitsOneBound(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(sql string) bool
	}{
		{"reading the run", func(sql string) bool { return strings.Contains(sql, "FROM runs WHERE run_id") }},
		{"reading the agent", func(sql string) bool { return strings.Contains(sql, "FROM agents a JOIN providers") }},
		{"reading the offering", func(sql string) bool { return strings.Contains(sql, "FROM llm_offerings") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0)
			l := e.rawLLM(0x5b, "gpt-4")
			a := e.connectAgent(0x12, "translator")
			_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")

			st, w, px := pgwatch.OpenStore(t, e.H.Cfg.Storage.DatabaseURL, 4)
			d, err := kyokdoor.New(kyokdoor.Options{Store: st, Redis: e.rdb, Prefix: e.H.Prefix,
				TokenSecret: []byte(secret), AckTimeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(d)
			// The server closes before the proxy and the pool (a handler
			// stuck on the frozen database, before the fix, is let go first).
			t.Cleanup(srv.Close)

			mark := w.Len()
			w.OnStart(func(sql string) {
				if tc.at(sql) {
					px.Freeze()
				}
			})
			he := &hangEnv{env: e, a: a, token: token}
			ctx, cancel := context.WithTimeout(t.Context(), guard)
			defer cancel()
			resp, err := http.DefaultClient.Do(he.request(ctx, srv.URL, plainBody))
			if err != nil {
				t.Fatalf("no answer within %v: %v", guard, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if got, _ := errorCode(t, b); resp.StatusCode != http.StatusServiceUnavailable || got != "unavailable" || resp.Header.Get("Retry-After") == "" {
				t.Fatalf("answered %d %s (Retry-After %q), want 503 unavailable with Retry-After", resp.StatusCode, b, resp.Header.Get("Retry-After"))
			}
			calls := w.Since(mark)
			pgwatch.CheckOneBoundSpent(t, calls, door.StorageTimeout, tc.at)
		})
	}
}
