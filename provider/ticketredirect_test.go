package provider

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A load balancer with a certificate answers plain HTTP with a 301 to the
// same URL over HTTPS (infra/broker.yaml). Go's HTTP client would follow
// it for POST /tickets as a GET, and funduq answered that GET with a bare
// 405: a provider left at http:// was told nothing it could act on. The
// client follows no redirect for its ticket; it says where it was sent.
func TestTicketRedirectIsReportedNotFollowedAsAGet(t *testing.T) {
	leader := newFakeFunduq(t)
	gets := make(chan string, 100)
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			gets <- r.Method + " " + r.URL.Path
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		http.Error(w, "not in this test", http.StatusServiceUnavailable)
	}))
	t.Cleanup(secure.Close)
	asked := make(chan struct{}, 100)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		http.Redirect(w, r, secure.URL+r.URL.RequestURI(), http.StatusMovedPermanently)
	}))
	t.Cleanup(plain.Close)
	logs := &syncbuf.Buffer{}
	cfg := baseConfig(t, leader, echoAgent(newGates()))
	cfg.BaseURL = plain.URL
	cfg.HTTPClient = secure.Client() // trusts the https end, as a real CA would
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	startClient(t, cfg)

	for range 2 { // the barrier: two attempts at the base
		select {
		case <-asked:
		case <-time.After(guard):
			t.Fatal("the client did not ask its base for a ticket")
		}
	}
	select {
	case got := <-gets:
		t.Fatalf("the client followed the 301 for its ticket as %s on the https URL", got)
	default:
	}
	for _, r := range logs.Records() {
		if r["msg"] == "provider link failed; reconnecting" {
			if e, _ := r["err"].(string); !strings.Contains(e, "301") || !strings.Contains(e, secure.URL+"/tickets") {
				t.Fatalf("the failure names neither the 301 nor where it pointed: %q", e)
			}
			return
		}
	}
	t.Fatalf("no failure logged:\n%s", logs.String())
}
