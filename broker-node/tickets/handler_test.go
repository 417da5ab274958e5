package tickets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/tickets"
	"github.com/funduq/funduq-go/core/redistest"
)

// funduqKey is the spec's example funduq key (seed b6…b6).
const funduqKey = "805440ee48051fc82ea64d905acabff0d21780f7fcaba6900e0e41387b1d4a57"

func do(t *testing.T, h http.Handler, method, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, "/tickets", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %q: Content-Type = %q", method, body, ct)
	}
	return rec
}

// errorOf is the message of the one error envelope, {"error": {"code",
// "message"}}, that the doors write too; its code must be code.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder, code string) string {
	t.Helper()
	var b struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatalf("body %q is not JSON: %v", rec.Body, err)
	}
	if b.Error == nil || b.Error.Message == "" || b.Error.Code != code {
		t.Fatalf("body %q is not {\"error\": {\"code\": %q, \"message\": \"...\"}}", rec.Body, code)
	}
	return b.Error.Message
}

func TestHandlerIssues(t *testing.T) {
	s, _, _ := newStore(t)
	h := tickets.Handler(s, funduqKey, nil)
	for _, body := range []string{
		`{"publicKey": "` + keyA + `"}`,
		`{"public_key": "` + keyA + `"}`,
		`{"publicKey": "` + keyA + `", "public_key": "` + keyA + `", "extra": 1}`,
	} {
		rec := do(t, h, http.MethodPost, body)
		if rec.Code != http.StatusCreated {
			t.Fatalf("%s: status %d, body %s", body, rec.Code, rec.Body)
		}
		var got map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got["funduqPublicKey"] != funduqKey || !ticketRE.MatchString(got["ticket"]) {
			t.Fatalf("%s: body %s", body, rec.Body)
		}
		if err := s.Claim(context.Background(), got["ticket"], keyA); err != nil {
			t.Fatalf("issued ticket does not claim for its key: %v", err)
		}
	}
}

func TestHandlerRefusesBadBodies(t *testing.T) {
	s, rdb, prefix := newStore(t)
	h := tickets.Handler(s, funduqKey, nil)
	for _, tc := range []struct {
		body, want string
	}{
		{``, "JSON object"},
		{`not json`, "JSON object"},
		{`[]`, "JSON object"},
		{`null`, "JSON object"},
		{`"` + keyA + `"`, "JSON object"},
		{`{"publicKey": "` + keyA + `"} trailing`, "JSON object"},
		{`{}`, "publicKey is required"},
		{`{"key": "` + keyA + `"}`, "publicKey is required"},
		{`{"publicKey": ""}`, "publicKey is empty"},
		{`{"publicKey": 42}`, "publicKey must be a string"},
		{`{"public_key": null}`, "public_key must be a string"},
		{`{"publicKey": "abc"}`, "publicKey: public key must be 64 lowercase hex chars: got 3 chars"},
		{`{"publicKey": "` + strings.ToUpper(keyA) + `"}`, "publicKey: public key must be 64 lowercase hex chars: char 0 is not lowercase hex"},
		{`{"publicKey": "` + keyA + `", "public_key": "` + keyB + `"}`, "publicKey and public_key disagree"},
	} {
		rec := do(t, h, http.MethodPost, tc.body)
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%q: status %d, want 400", tc.body, rec.Code)
			continue
		}
		if msg := errorOf(t, rec, "bad_request"); !strings.Contains(msg, tc.want) {
			t.Errorf("%q: error %q, want it to contain %q", tc.body, msg, tc.want)
		}
	}
	if keys := redistest.Keys(t, rdb, prefix); len(keys) != 0 {
		t.Fatalf("refused requests issued tickets: %v", keys)
	}
}

func TestHandlerBodyLimit(t *testing.T) {
	s, _, _ := newStore(t)
	h := tickets.Handler(s, funduqKey, nil)
	pad := strings.Repeat(" ", tickets.MaxBodyBytes)
	rec := do(t, h, http.MethodPost, `{"publicKey": "`+keyA+`"}`+pad)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", rec.Code)
	}
	if msg := errorOf(t, rec, "body_too_large"); !strings.Contains(msg, "4096") {
		t.Fatalf("error %q does not name the limit", msg)
	}
	// Exactly at the limit is fine.
	body := `{"publicKey": "` + keyA + `"}`
	body += strings.Repeat(" ", tickets.MaxBodyBytes-len(body))
	if rec := do(t, h, http.MethodPost, body); rec.Code != http.StatusCreated {
		t.Fatalf("body of exactly %d bytes: status %d", len(body), rec.Code)
	}
}

func TestHandlerMethodNotAllowed(t *testing.T) {
	s, _, _ := newStore(t)
	h := tickets.Handler(s, funduqKey, nil)
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodHead} {
		rec := do(t, h, m, "")
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s: status %d, want 405", m, rec.Code)
		}
		if a := rec.Header().Get("Allow"); a != http.MethodPost {
			t.Errorf("%s: Allow = %q", m, a)
		}
		if m != http.MethodHead {
			errorOf(t, rec, "method_not_allowed")
		}
	}
}

func TestHandlerStoreDown(t *testing.T) {
	rdb, _ := redistest.Client(t)
	dead := redis.NewClient(rdb.Options())
	dead.Close()
	var logs bytes.Buffer
	h := tickets.Handler(tickets.New(dead, "x:"), funduqKey, slog.New(slog.NewTextHandler(&logs, nil)))
	rec := do(t, h, http.MethodPost, `{"publicKey": "`+keyA+`"}`)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", rec.Code)
	}
	if ra := rec.Header().Get("Retry-After"); ra != "1" {
		t.Fatalf("Retry-After = %q", ra)
	}
	msg := errorOf(t, rec, "storage_unavailable")
	if strings.Contains(strings.ToLower(msg), "redis") || strings.Contains(msg, "closed") {
		t.Fatalf("error %q leaks the driver's message", msg)
	}
	if !strings.Contains(logs.String(), "closed") {
		t.Fatalf("cause not logged: %q", logs.String())
	}
}

// Over a real listener, too.
func TestHandlerOverHTTP(t *testing.T) {
	s, _, _ := newStore(t)
	srv := httptest.NewServer(tickets.Handler(s, funduqKey, nil))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+keyB+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct{ Ticket, FunduqPublicKey string }
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated || got.FunduqPublicKey != funduqKey {
		t.Fatalf("status %d, body %+v", resp.StatusCode, got)
	}
	if err := s.Claim(context.Background(), got.Ticket, keyB); err != nil {
		t.Fatal(err)
	}
}

func TestHandlerPanicsOnBadFunduqKey(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	tickets.Handler(nil, "nope", nil)
}

// POST /tickets serves a key that has claimed PerMinute tickets this minute
// (counted in Redis) 429 with Retry-After, issuing nothing; another key and
// the next minute are unaffected. Requests alone count nothing: a stranger
// may ask in any key's name.
func TestHandlerRateLimit(t *testing.T) {
	s, rdb, prefix := newStore(t)
	now := time.Date(2026, 12, 1, 12, 0, 10, 0, time.UTC)
	s.Now = func() time.Time { return now }
	h := tickets.LimitedHandler(s, funduqKey, nil, tickets.HandlerOptions{PerMinute: 2, Now: func() time.Time { return now }})
	body := `{"publicKey": "` + keyA + `"}`
	issue := func(what string) string {
		t.Helper()
		rec := do(t, h, http.MethodPost, body)
		var tr struct{ Ticket string }
		if rec.Code != http.StatusCreated || json.Unmarshal(rec.Body.Bytes(), &tr) != nil {
			t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
		}
		return tr.Ticket
	}
	for i := range 5 {
		issue(fmt.Sprintf("request %d, nothing claimed", i))
	}
	for i := range 2 {
		if err := s.Claim(context.Background(), issue(fmt.Sprintf("ticket %d", i)), keyA); err != nil {
			t.Fatal(err)
		}
	}
	before := countTickets(t, rdb, prefix)
	rec := do(t, h, http.MethodPost, body)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "50" {
		t.Fatalf("after two claims: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	errorOf(t, rec, "rate_limited")
	if after := countTickets(t, rdb, prefix); after != before {
		t.Fatalf("a refused request issued a ticket: %d→%d", before, after)
	}
	if rec := do(t, h, http.MethodPost, `{"publicKey": "`+keyB+`"}`); rec.Code != http.StatusCreated {
		t.Fatalf("another key: %d", rec.Code)
	}
	now = now.Add(time.Minute)
	issue("next minute")
}

// A body two JSON readers could read differently is refused: a repeated
// key, invalid UTF-8.
func TestHandlerRefusesAmbiguousBodies(t *testing.T) {
	s, _, _ := newStore(t)
	h := tickets.Handler(s, funduqKey, nil)
	for _, body := range []string{
		`{"publicKey": "` + keyA + `", "publicKey": "` + keyB + `"}`,
		"{\"publicKey\": \"" + keyA + "\", \"x\": \"\xff\"}",
	} {
		if rec := do(t, h, http.MethodPost, body); rec.Code != http.StatusBadRequest {
			t.Errorf("%q: %d %s", body, rec.Code, rec.Body)
		}
	}
}

func countTickets(t *testing.T, rdb *redis.Client, prefix string) int {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), prefix+"ticket:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

// While a takeover is under way (PublishedKey answers ErrTakeover) the
// answer is 503 takeover_in_progress with Retry-After, it names no key,
// and nothing reaches the ticket store: neither a ticket nor the key's
// count (design.md §Deployment, "A takeover under way").
func TestHandlerRefusesDuringATakeover(t *testing.T) {
	s, rdb, prefix := newStore(t)
	h := tickets.LimitedHandler(s, funduqKey, nil, tickets.HandlerOptions{
		PublishedKey: func(context.Context) (string, error) { return "", tickets.ErrTakeover }})
	rec := do(t, h, http.MethodPost, `{"publicKey": "`+keyA+`"}`)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != tickets.TakeoverRetryAfter {
		t.Fatalf("POST /tickets during a takeover: %d Retry-After %q %s; want 503 with Retry-After %s",
			rec.Code, rec.Header().Get("Retry-After"), rec.Body, tickets.TakeoverRetryAfter)
	}
	if msg := errorOf(t, rec, tickets.CodeTakeoverInProgress); strings.Contains(msg, funduqKey) || strings.Contains(msg, keyA) {
		t.Fatalf("the refusal names a key: %q", msg)
	}
	if keys := redistest.Keys(t, rdb, prefix); len(keys) != 0 {
		t.Fatalf("a refused request wrote %v", keys)
	}
}
