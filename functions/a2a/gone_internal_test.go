package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
)

// A caller that hangs up mid-request (its context cancelled under a
// read) is not an internal error in the log: operators alert on those.
// It is logged at INFO as the caller going away, whatever PostgreSQL's
// client made of the cancel — a query cut off, or one that found the
// context already done as it began (which pgx calls a timeout, safe to
// retry: a storage outage, were the caller still there). Any other
// unexpected error still is an error. Seen in the load tool's output as
// "a2a: internal error … context canceled" and "a2a: storage
// unavailable … context already done" at the end of every phase.
func TestCallerGoneIsNotLoggedAsAnInternalError(t *testing.T) {
	pool := storetest.Pool(t)
	conn, err := pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, alreadyDone := conn.Exec(done, "SELECT 1")
	if !door.Unavailable(alreadyDone) || !errors.Is(alreadyDone, context.Canceled) {
		t.Fatalf("a query on a cancelled context: %v, want an unavailable-looking cancel", alreadyDone)
	}
	for _, tc := range []struct {
		name      string
		cancelled bool
		err       error
		wantError bool
	}{
		{"caller gone", true, fmt.Errorf("read record of run r: %w", context.Canceled), false},
		{"caller gone as a query began", true, fmt.Errorf("get run r: %w", alreadyDone), false},
		{"a failure", false, errors.New("read record of run r: boom"), true},
		{"a failure, the caller gone too", true, errors.New("read record of run r: boom"), true},
		{"cancelled, not by the caller", false, fmt.Errorf("x: %w", context.Canceled), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := &Handler{log: slog.New(slog.NewJSONHandler(&logs, nil))}
			ctx, cancel := context.WithCancel(context.Background())
			if tc.cancelled {
				cancel()
			} else {
				defer cancel()
			}
			r := httptest.NewRequest("POST", "/a2a/k/echo", nil).WithContext(ctx)
			check := func(who string) {
				t.Helper()
				var line map[string]any
				if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
					t.Fatalf("%s logged %q", who, logs.String())
				}
				isError := line["level"] == "ERROR"
				if isError != tc.wantError {
					t.Errorf("%s logged at ERROR: %v, want %v\n%s", who, isError, tc.wantError, logs.String())
				}
				if gone := line["level"] == "INFO" && line["msg"] == "caller went away"; gone == tc.wantError {
					t.Errorf("%s logged the caller going away: %v, want %v\n%s", who, gone, !tc.wantError, logs.String())
				}
				if !tc.wantError && (strings.Contains(logs.String(), "internal") || strings.Contains(logs.String(), "unavailable")) {
					t.Errorf("%s logged the caller going away as funduq's fault: %s", who, logs.String())
				}
			}
			h.toRPC(r, tc.err)
			check("toRPC")
			// The AG-UI door's envelope writer decides the same way.
			logs.Reset()
			door.WriteError(httptest.NewRecorder(), r, h.log, tc.err)
			check("door.WriteError")
		})
	}
}
