package door_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A REST API proxy event's path is the request path as the caller sent it,
// still percent-encoded (REST APIs, unlike HTTP APIs, do not decode it).
// The glue took it for a decoded path and encoded it again, so behind API
// Gateway a door saw "ec%68o" where the local doors server (net/http) sees
// "echo": POST /agui/{key}/ec%68o was 404 agent_not_found through the
// Lambda and a run locally, and /threads/a%2Fb named "a%2Fb", not "a/b".
// The same request must name the same thing on both seats.
func TestAPIGatewayPathIsPercentEncoded(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/agui/{provider}/{name}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.PathValue("provider")+"|"+r.PathValue("name"))
	})
	mux.HandleFunc("/threads/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.PathValue("id"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	local := httptest.NewServer(mux)
	defer local.Close()

	for _, path := range []string{
		"/agui/ab/ec%68o",
		"/agui/%61b/echo",
		"/threads/a%2Fb",
		"/threads/caf%C3%A9",
		"/threads/a%3Fb",
		"/threads/a%23b",
		"/threads/100%25",
		"/threads/plain-id",
	} {
		t.Run(path, func(t *testing.T) {
			resp, err := http.Get(local.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p, br := serve(t, ctx, mux, proxyEvent("GET", path, ""))
			got, _ := io.ReadAll(br)
			if p.StatusCode != resp.StatusCode || string(got) != string(want) {
				t.Fatalf("GET %s through API Gateway: %d %q; the local server: %d %q", path, p.StatusCode, got, resp.StatusCode, want)
			}
		})
	}
	// A path that arrives decoded (an HTTP API, a test event) still names
	// what it says, and is never split into a query or fragment.
	for path, want := range map[string]string{"/threads/café": "café", "/threads/a?b": "a?b", "/threads/a#b": "a#b", "/threads/100%": "100%"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		p, br := serve(t, ctx, mux, proxyEvent("GET", path, ""))
		got, _ := io.ReadAll(br)
		cancel()
		if p.StatusCode != 200 || string(got) != want {
			t.Errorf("decoded path %q: %d %q, want %q", path, p.StatusCode, got, want)
		}
	}
}
