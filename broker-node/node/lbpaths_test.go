package node_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// On AWS the load balancer forwards /console/* but not /metrics
// (infra/broker.yaml, docs/design.md "The broker's load balancer forwards
// only the public paths"). A path that matches the rule but names /metrics
// through dot segments must not be served /metrics by the node: an unclean
// path is redirected to its clean form (which the load balancer refuses),
// an encoded one stays the console's.
func TestConsolePathsNeverServeMetrics(t *testing.T) {
	n := standby(t, storetest.URL(t), redistest.URL())
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		n.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://node"+path, nil))
		return rec
	}
	// The control: the node itself serves /metrics.
	if rec := get("/metrics"); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "# HELP funduq_") {
		t.Fatalf("/metrics %d: want the node's metrics", rec.Code)
	}
	for _, p := range []string{"/console/../metrics", "/console//../metrics", "/console/./../metrics"} {
		rec := get(p)
		if rec.Code != http.StatusTemporaryRedirect && rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/metrics" ||
			strings.Contains(rec.Body.String(), "# HELP") {
			t.Errorf("%s: %d Location %q; want a redirect to /metrics, not the metrics", p, rec.Code, rec.Header().Get("Location"))
		}
	}
	for _, p := range []string{"/console/%2e%2e/metrics", "/console/..%2fmetrics", "/console/%2E%2E%2Fmetrics"} {
		if rec := get(p); rec.Code == http.StatusOK || strings.Contains(rec.Body.String(), "# HELP") {
			t.Errorf("%s: %d; want the console's refusal, not the metrics", p, rec.Code)
		}
	}
}
