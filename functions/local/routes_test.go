package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/routetest"
)

// The local server answers what no door serves in the error envelope
// (D13), as each door does behind API Gateway: a door's prefix without
// its slash or a path not in its clean form is an unknown route (net/http
// would redirect with an HTML body), and a route of one method answers
// another 405 with Allow (it said 404 "no such route" of a route it
// serves).
func TestLocalDoorsAnswerOddRoutesInTheEnvelope(t *testing.T) {
	srv := localDoors(t)
	routetest.Check(t, srv.URL, `{}`, []routetest.Route{
		routetest.NotFound("POST", "/agui"),
		routetest.NotFound("GET", "/a2a"),
		routetest.NotFound("GET", "/threads"),
		routetest.NotFound("GET", "/runs"),
		routetest.NotFound("GET", "/runs//events"),
		routetest.NotFound("POST", "/a2a//x/echo"),
		routetest.NotFound("GET", "/threads/a/../b"),
		routetest.NotAllowed("POST", "/agents", "GET"),
		routetest.NotAllowed("POST", "/health", "GET"),
		routetest.NotAllowed("GET", "/kyok/v1/chat/completions", "POST"),
		routetest.NotFound("GET", "/nowhere"),
	})
}

// A CONNECT is answered like any other method: its path, as sent, in its
// clean form or refused as an unknown route, in the error envelope (D13).
// ServeClean let it pass unchecked (net/http's mux does not clean a
// CONNECT's path either), so an authority-form target got net/http's
// plain-text 404 and a path with ".." reached the handler under the
// prefix it named before climbing out of it.
func TestLocalDoorsAnswerCONNECTInTheEnvelope(t *testing.T) {
	srv := localDoors(t)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		target      string
		status      int
		code, allow string
	}{
		{addr, http.StatusNotFound, "not_found", ""},
		{"/chat/../agents", http.StatusNotFound, "not_found", ""},
		{"/threads/a/../b", http.StatusNotFound, "not_found", ""},
		{"/agents", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tc.target, addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			t.Fatalf("CONNECT %s: %v", tc.target, err)
		}
		// A CONNECT's answer has no length: the body is read up to the
		// end of the envelope's one line.
		line, _ := bufio.NewReader(resp.Body).ReadString('\n')
		c.Close()
		var env struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if resp.StatusCode != tc.status || json.Unmarshal([]byte(line), &env) != nil || env.Error.Code != tc.code ||
			resp.Header.Get("Allow") != tc.allow || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("CONNECT %s: %d %s (Allow %q): %q; want %d %s in the error envelope",
				tc.target, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"), line, tc.status, tc.code)
		}
	}
}

// The local server answers "OPTIONS *" like any other route no door
// serves: 404 in the error envelope (D13). net/http answered it by itself
// with an empty 200, as if the doors took it.
func TestLocalServerAnswersOptionsStarInTheEnvelope(t *testing.T) {
	h := nodetest.Start(t, nil)
	base := startDoors(t, h)
	addr := strings.TrimPrefix(base, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = fmt.Fprintf(c, "OPTIONS * HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodOptions})
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
	if resp.StatusCode != http.StatusNotFound || json.Unmarshal(b, &env) != nil || env.Error.Code != "not_found" {
		t.Errorf("OPTIONS *: %d %s: %q; want 404 not_found in the error envelope", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
}

// localDoors serves the local server's mux over the test's own database
// and Redis prefix.
func localDoors(t *testing.T) *httptest.Server {
	t.Helper()
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
	return srv
}
