package kyok_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A calling agent that hangs up mid-call is no fault of funduq's nor of
// the LLM provider's: the door's log says the caller went away, at INFO,
// and holds no WARN or ERROR and no 5xx for it — the lines an operator
// alerts on — whether the call was still being checked (its read of the
// offering waiting in PostgreSQL, here behind a held lock) or waiting for
// its answer.
func TestCallerGoneMidCallIsNotAFailure(t *testing.T) {
	e := newEnv(t, 0)
	a := e.connectAgent(0x11, "translator")
	for i, tc := range []struct {
		name string
		// hold, when set, is taken before the call is made, and returns
		// what undoes it; there returns once the call waits where its
		// caller is to hang up.
		hold  func(t *testing.T) (release func())
		there func(t *testing.T, l *llm)
	}{
		{"checking the call",
			func(t *testing.T) func() { return e.H.Hold(`LOCK TABLE llm_offerings IN ACCESS EXCLUSIVE MODE`) },
			func(t *testing.T, _ *llm) {
				eventually(t, "the call's read of the offering waits", func() bool {
					var n int
					_ = e.H.DB().QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
						WHERE datname = current_database() AND wait_event_type = 'Lock'
						AND query LIKE '%FROM llm_offerings o CROSS JOIN broker_leader%'`).Scan(&n)
					return n > 0
				})
			}},
		{"waiting for the answer", nil,
			func(t *testing.T, l *llm) { l.request() }}, // taken up, and never answered
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &syncbuf.Buffer{}
			ds, returned := e.loggedDoor(t, logs)
			l := e.attachLLM(byte(0x41+i), "gpt-4")
			_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.Key, Name: "gpt-4"}, "")
			if tc.hold != nil {
				defer tc.hold(t)()
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ts := time.Now().Unix()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ds.URL+kyokdoor.Path, strings.NewReader(streamBody))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set(kyokdoor.HeaderTimestamp, strconv.FormatInt(ts, 10))
			req.Header.Set(kyokdoor.HeaderSignature, a.signer.Sign(identity.KyokCallPayload(token, ts, []byte(streamBody))))
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			tc.there(t, l)
			// The calling agent hangs up; the door sees it go.
			cancel()
			<-done
			select {
			case <-returned:
			case <-time.After(guard):
				t.Fatal("the door did not notice its caller leave")
			}
			var gone []map[string]any
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) != nil {
					continue
				}
				if m["level"] != "INFO" || strings.Contains(line, `"status":5`) {
					t.Errorf("logged as a failure: %s", line)
				}
				if m["msg"] == "caller went away" {
					gone = append(gone, m)
				}
			}
			if len(gone) != 1 || gone[0]["path"] != kyokdoor.Path {
				t.Errorf("lines saying the caller went away: %v, want one naming the path; the log:\n%s", gone, logs)
			}
		})
	}
}

// loggedDoor is a KYOK door of the test's own logging to logs, behind a
// server that says on returned each time the door has finished a request.
func (e *env) loggedDoor(t *testing.T, logs *syncbuf.Buffer) (ds *httptest.Server, returned <-chan struct{}) {
	t.Helper()
	door, err := kyokdoor.New(kyokdoor.Options{Store: e.H.Store, Redis: e.rdb, Prefix: e.H.Prefix,
		TokenSecret: []byte(secret), AckTimeout: 3 * time.Second,
		Log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ret := make(chan struct{}, 8)
	ds = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		door.ServeHTTP(w, r)
		ret <- struct{}{}
	}))
	t.Cleanup(ds.Close)
	return ds, ret
}
