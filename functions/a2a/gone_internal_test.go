package a2a

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/functions/door"
)

// A caller that hangs up mid-request (its context cancelled under a
// read) is not an internal error in the log: operators alert on those.
// Any other unexpected error still is. Seen in the load tool's output as
// "a2a: internal error … context canceled" at the end of every phase.
func TestCallerGoneIsNotLoggedAsAnInternalError(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cancelled bool
		err       error
		wantError bool
	}{
		{"caller gone", true, fmt.Errorf("read record of run r: %w", context.Canceled), false},
		{"a failure", false, errors.New("read record of run r: boom"), true},
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
			e := h.toRPC(r, tc.err)
			if e.Code != CodeInternalError {
				t.Fatalf("code %d, want internal", e.Code)
			}
			if got := strings.Contains(logs.String(), `"level":"ERROR"`); got != tc.wantError {
				t.Fatalf("logged at ERROR: %v, want %v\n%s", got, tc.wantError, logs.String())
			}
			// The AG-UI door's envelope writer decides the same way.
			logs.Reset()
			door.WriteError(httptest.NewRecorder(), r, h.log, tc.err)
			if got := strings.Contains(logs.String(), `"level":"ERROR"`); got != tc.wantError {
				t.Fatalf("door.WriteError logged at ERROR: %v, want %v\n%s", got, tc.wantError, logs.String())
			}
		})
	}
}
