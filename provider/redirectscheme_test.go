package provider

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A client configured with an https BaseURL chose TLS for its link: the
// ticket, the proof, and then every run's input and output. A standby's
// 503 naming the leader over plain http (an advertised URL left at http
// behind a TLS proxy, or a node that lies) must not take it off TLS: the
// client does not follow it and keeps to its base, saying why.
func TestStandbyNamingAPlainHTTPLeaderIsNotFollowedFromHTTPS(t *testing.T) {
	leader := newFakeFunduq(t) // plain http
	asked := make(chan struct{}, 100)
	standby := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked <- struct{}{}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "not the leader", "leader": leader.url()})
	}))
	t.Cleanup(standby.Close)
	cfg := baseConfig(t, leader, echoAgent(newGates()))
	cfg.BaseURL = standby.URL
	cfg.HTTPClient = standby.Client()
	startClient(t, cfg)

	// The barrier: the client came back to its https base twice. Had it
	// followed the named leader it would have registered there and never
	// come back.
	for range 2 {
		select {
		case <-asked:
		case n := <-leader.ticketSeen:
			t.Fatalf("the client left its https base for the plain-http leader a standby named (POST /tickets #%d there)", n)
		case <-time.After(guard):
			t.Fatal("the client did not come back to its https base")
		}
	}
	select {
	case n := <-leader.ticketSeen:
		t.Fatalf("the client left its https base for the plain-http leader a standby named (POST /tickets #%d there)", n)
	default:
	}
}
