// Package routetest checks, for tests, that a server answers routes it
// does not serve as the doors' one error envelope (design.md D13): the
// status, the envelope's code, Allow and a JSON body, never net/http's
// redirects or plain-text defaults.
package routetest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Route is one request and the refusal it must get.
type Route struct {
	Method, Path string
	Status       int
	Code, Allow  string
}

// Check sends each route to base (a server's URL) with body, following no
// redirect, and fails t for each answer that is not the route's refusal
// in the error envelope.
func Check(t *testing.T, base, body string, routes []Route) {
	t.Helper()
	noRedirect := &http.Client{Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range routes {
		req, err := http.NewRequest(tc.Method, base+tc.Path, strings.NewReader(body))
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
		if resp.StatusCode != tc.Status || json.Unmarshal(b, &env) != nil || env.Error.Code != tc.Code ||
			resp.Header.Get("Allow") != tc.Allow || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: %d %s (Allow %q, Location %q): %q; want %d %s in the error envelope",
				tc.Method, tc.Path, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Allow"),
				resp.Header.Get("Location"), b, tc.Status, tc.Code)
		}
	}
}

// NotFound is a route refused as unknown: 404 not_found.
func NotFound(method, path string) Route {
	return Route{Method: method, Path: path, Status: http.StatusNotFound, Code: "not_found"}
}

// NotAllowed is a route served for the methods allow only: 405
// method_not_allowed with Allow.
func NotAllowed(method, path, allow string) Route {
	return Route{Method: method, Path: path, Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Allow: allow}
}
