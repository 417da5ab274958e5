package agui_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// Every answer of the door is its error envelope (D13), as the door
// behind a Lambda serves it: a path not in its clean form ("//", "/./",
// "/../") is an unknown route, not net/http's redirect with an HTML body
// (a POST's 307 re-sent elsewhere), and a route served for one method
// answers another 405 with Allow, as every route of the door does.
func TestOutsideOddPathsAnswerTheEnvelope(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	noRedirect := &http.Client{Timeout: guard,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path string
		status       int
		code, allow  string
	}{
		{"GET", "/runs//events", http.StatusNotFound, "not_found", ""},
		{"GET", "/threads/a/../thread_x", http.StatusNotFound, "not_found", ""},
		{"POST", "/agui/" + p.Key + "/./echo", http.StatusNotFound, "not_found", ""},
		{"POST", "/agui//" + p.Key + "/echo", http.StatusNotFound, "not_found", ""},
		{"POST", "/agents", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
		{"DELETE", "/agents", http.StatusMethodNotAllowed, "method_not_allowed", "GET"},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(input("t", "r", "")))
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
