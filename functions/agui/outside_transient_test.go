package agui_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// A transient failure of the door's insert — a deadlock or serialization
// failure, raised here by a trigger on runs for the first fail attempts —
// is retried as a whole transaction, at most three attempts in all (D13):
// one failure costs the caller nothing (its run is made once), and three
// in a row are answered as what they are, storage trouble the caller may
// retry (503 with Retry-After in the envelope), not a 500 "internal
// error". A failure that is not transient is attempted once. The door's
// step bound is pinned (startPinnedDoor): the three attempts and their
// backoff must fit in it, which on a starved machine the product's 1.5 s
// need not, and the count is the claim, not the machine's speed.
func TestOutsideTransientInsertFailuresAreRetriedThenUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     string
		fail     int
		status   int
		attempts int
	}{
		{"one deadlock", "40P01", 1, http.StatusOK, 2},
		{"one serialization failure", "40001", 1, http.StatusOK, 2},
		{"deadlocks throughout", "40P01", 100, http.StatusServiceUnavailable, 3},
		{"serialization failures throughout", "40001", 100, http.StatusServiceUnavailable, 3},
		{"a check violation", "23514", 100, http.StatusInternalServerError, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := nodetest.Start(t, nil)
			p := h.Connect(0xe1, nil)
			p.Register("echo")
			url := aguiURL(startPinnedDoor(t, h, nil), p.Key, "echo")
			ctx := context.Background()
			for _, q := range []string{
				`CREATE SEQUENCE door_attempts`,
				fmt.Sprintf(`CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN
						IF nextval('door_attempts') <= %d THEN
							RAISE EXCEPTION 'injected' USING ERRCODE = '%s';
						END IF;
						RETURN NEW;
					END $$`, tc.fail, tc.code),
				`CREATE TRIGGER fail_insert BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION fail_insert()`,
			} {
				if _, err := h.DB().Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			runs := runCount(t, h)
			resp, cancel := do(t, "POST", url, input("t", "r1", ""), nil)
			defer cancel()
			resp.Body.Close()
			var attempts int
			if err := h.DB().QueryRow(ctx, `SELECT last_value FROM door_attempts`).Scan(&attempts); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || attempts != tc.attempts {
				t.Fatalf("answered %d (Retry-After %q) after %d attempts; want %d after %d",
					resp.StatusCode, resp.Header.Get("Retry-After"), attempts, tc.status, tc.attempts)
			}
			if tc.status == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			want := runs
			if tc.status == http.StatusOK {
				want++
			}
			if got := runCount(t, h); got != want {
				t.Fatalf("%d runs made, want %d", got-runs, want-runs)
			}
		})
	}
}
