package main

import (
	"context"
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
	runstatus "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/door"
)

// A page on another site can make the browser of someone running the
// local doors (or reaching a door on their network) POST to them: a form,
// or fetch with a text/plain body, is a "simple" request no CORS preflight
// stops, and the doors read any body as JSON whatever its Content-Type.
// Such a request started a run on the victim's agent, its reply sent to
// nobody (a KYOK opt-in in the body would spend the victim's LLM). The
// doors serve no page to another origin (they send no CORS headers, so no
// cross-origin script can read an answer), so a browser's cross-site POST
// is refused 403 cross_origin_refused in the envelope, before anything
// is read or written, as the console refuses one (Go's
// CrossOriginProtection: Sec-Fetch-Site, else Origin against Host). The
// chat page (same origin) and programs (no such headers) are served as
// before (design.md §The doors).
func TestOutsideCrossSiteBrowserPostIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	deps, err := door.Connect(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity},
		door.ConnectOptions{RedisPrefix: h.Prefix, MaxConns: 4})
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
	runs := func() int {
		var n int
		if err := h.DB().QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	aguiBody := `{"threadId":"","runId":"","state":{},"messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{}}`
	a2aBody := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"blocking":false}}}`
	post := func(path, ctype, body string, hdr map[string]string) (*http.Response, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ctype)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			return resp, ""
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	for _, site := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		{"Sec-Fetch-Site": "same-site", "Origin": "https://sub.example"},
		{"Origin": "https://evil.example"}, // a browser without Fetch Metadata
	} {
		for _, tc := range []struct{ path, ctype, body string }{
			{"/agui/" + p.Key + "/echo", "text/plain", aguiBody},
			{"/agui/" + p.Key + "/echo", "application/x-www-form-urlencoded", aguiBody},
			{"/a2a/" + p.Key + "/echo", "text/plain", a2aBody},
			{"/kyok/v1/chat/completions", "text/plain", `{}`},
		} {
			resp, b := post(tc.path, tc.ctype, tc.body, site)
			if resp.StatusCode == http.StatusOK && b == "" {
				resp.Body.Close()
			}
			var env struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.Unmarshal([]byte(b), &env)
			if resp.StatusCode != http.StatusForbidden || env.Error.Code != "cross_origin_refused" {
				t.Errorf("POST %s (%s) with %v: %d %s %.200s; want 403 cross_origin_refused",
					tc.path, tc.ctype, site, resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
		}
	}
	if n := runs(); n != 0 {
		t.Fatalf("cross-site posts wrote %d runs", n)
	}

	// The chat page's own POST, and a program's, are served.
	for _, hdr := range []map[string]string{
		{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL},
		nil,
	} {
		resp, b := post("/agui/"+p.Key+"/echo", "application/json", aguiBody, hdr)
		if resp.StatusCode != http.StatusOK || b != "" {
			t.Fatalf("POST with %v: %d %s", hdr, resp.StatusCode, b)
		}
		f := p.Offer()
		p.Accept(f.RunID)
		p.Complete(f.RunID, *f.ThreadID)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h.WaitStatus(f.RunID, runstatus.Completed)
	}
}
