package provider

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/funduq/funduq-go/internal/syncbuf"
)

// funduq answers a key past FUNDUQ_TICKETS_PER_MINUTE 429 with
// Retry-After, the seconds left in its minute. A client that asked again
// on its own backoff (a few milliseconds at first) would only be refused
// again, and say it would retry at once: it waits at least what funduq
// asked, and its log says so.
func TestTicketRefusalsWaitTheirRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"rate limited", http.StatusTooManyRequests,
			`{"error":{"code":"rate_limited","message":"too many tickets for this key; retry later"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := make(chan struct{}, 100)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select { // a client that does not wait asks many times
				case asked <- struct{}{}:
				default:
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			logs := &syncbuf.Buffer{}
			cfg := baseConfig(t, newFakeFunduq(t), echoAgent(newGates()))
			cfg.BaseURL = srv.URL
			cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
			_, stop := startClient(t, cfg)
			select {
			case <-asked:
			case <-time.After(guard):
				t.Fatal("the client did not ask for a ticket")
			}
			// retry_in reads as a Go duration ("7s"), as the node's own
			// durations do ("ttl":"10s"): slog's JSON writes a bare
			// time.Duration as nanoseconds ("retry_in":171898618), which an
			// agent author reading the log could not tell the unit of.
			var retryIn any
			deadline := time.Now().Add(guard)
			for retryIn == nil {
				for _, r := range logs.Records() {
					if r["msg"] == "provider link failed; reconnecting" {
						retryIn = r["retry_in"]
						break
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("no failure logged:\n%s", logs.String())
				}
				time.Sleep(2 * time.Millisecond)
			}
			stop()
			str, _ := retryIn.(string)
			d, err := time.ParseDuration(str)
			if err != nil {
				t.Fatalf("retry_in %v is not a duration string: %v", retryIn, err)
			}
			if d < 7*time.Second {
				t.Fatalf("refused with Retry-After: 7, the client retries in %s", d)
			}
		})
	}
}
