package a2a_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A deadlock in every attempt of a send's insert (a trigger on runs
// raises 40P01) is retried three times in all and then answered as
// storage trouble the caller may retry — -32043 with 503 and Retry-After
// — not -32603 "internal error" (D13). The door's step bound is pinned
// (startPinnedDoor): the three attempts and their backoff must fit in it,
// which on a starved machine the product's 1.5 s need not, and the count
// is the claim, not the machine's speed.
func TestOutsideTransientInsertFailuresAnswerUnavailable(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	c := newClient(t, startPinnedDoor(t, h, nil), p.Key, "echo", "")
	ctx := context.Background()
	for _, q := range []string{
		`CREATE SEQUENCE door_attempts`,
		`CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				PERFORM nextval('door_attempts');
				RAISE EXCEPTION 'injected' USING ERRCODE = '40P01';
			END $$`,
		`CREATE TRIGGER fail_insert BEFORE INSERT ON runs FOR EACH ROW EXECUTE FUNCTION fail_insert()`,
	} {
		if _, err := h.DB().Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	body := c.body("message/send", map[string]any{"message": c.message("m1", "hi", nil)})
	resp, cancel := c.post(body, nil)
	defer cancel()
	resp.Body.Close()
	r := c.rawCall(body, nil) // the same send again: the same answer
	var attempts int
	if err := h.DB().QueryRow(ctx, `SELECT last_value FROM door_attempts`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		r.Status != http.StatusServiceUnavailable || r.Error == nil || r.Error.Code != a2a.CodeUnavailable {
		t.Fatalf("answered %d (Retry-After %q), then %d %+v; want 503 with Retry-After and error %d",
			resp.StatusCode, resp.Header.Get("Retry-After"), r.Status, r.Error, a2a.CodeUnavailable)
	}
	if attempts != 6 {
		t.Fatalf("%d attempts for two sends, want 3 each", attempts)
	}
}
