package nodetest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
)

// Balancer stands in for a deployment's load balancer: every request goes
// to the first of nodes whose /readyz answers 200 (the leader), or to the
// first node when none does. WebSocket upgrades pass through.
func Balancer(t *testing.T, nodes ...*Harness) string {
	t.Helper()
	pick := func() *Harness {
		for _, n := range nodes {
			if n.Ready() {
				return n
			}
		}
		return nodes[0]
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target, _ := url.Parse(pick().URL)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.ErrorLog = log.New(io.Discard, "", 0) // a node going away mid-test is expected
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
