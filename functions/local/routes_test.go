package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
)

// The local server answers what no door serves in the error envelope
// (D13), as each door does behind API Gateway: a door's prefix without
// its slash or a path not in its clean form is an unknown route (net/http
// would redirect with an HTML body), and a route of one method answers
// another 405 with Allow (it said 404 "no such route" of a route it
// serves).
func TestLocalDoorsAnswerOddRoutesInTheEnvelope(t *testing.T) {
	_, prefix := redistest.Client(t)
	deps, err := door.Connect(config.Door{
		Storage:  config.Storage{DatabaseURL: storetest.URL(t), RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, door.ConnectOptions{RedisPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deps.Close)
	mux, err := Mux(deps, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"POST", "/agui", http.StatusNotFound, "not_found", ""},
		{"GET", "/a2a", http.StatusNotFound, "not_found", ""},
		{"GET", "/threads", http.StatusNotFound, "not_found", ""},
		{"GET", "/runs", http.StatusNotFound, "not_found", ""},
		{"GET", "/runs//events", http.StatusNotFound, "not_found", ""},
		{"POST", "/a2a//x/echo", http.StatusNotFound, "not_found", ""},
		{"GET", "/threads/a/../b", http.StatusNotFound, "not_found", ""},
		{"POST", "/agents", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{"POST", "/health", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{"GET", "/kyok/v1/chat/completions", http.StatusMethodNotAllowed, "method_not_allowed", "POST"},
		{"GET", "/nowhere", http.StatusNotFound, "not_found", ""},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var env struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if resp.StatusCode != tc.status || json.Unmarshal(b, &env) != nil || env.Error.Code != tc.code ||
			resp.Header.Get("Allow") != tc.allow || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: %d %s (Allow %q, Location %q): %q; want %d %s in the error envelope",
				tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"),
				resp.Header.Get("Location"), b, tc.status, tc.code)
		}
	}
}
