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

// crossSite is the local doors over a node with one provider serving
// echo, and a poster for browser-like requests.
type crossSite struct {
	h    *nodetest.Harness
	p    *nodetest.Prov
	srv  *httptest.Server
	post func(path, ctype, body string, hdr map[string]string) (*http.Response, string)
	runs func() int
}

const (
	crossSiteAGUIBody = `{"threadId":"","runId":"","state":{},"messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],"forwardedProps":{}}`
	crossSiteA2ABody  = `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hi"}]},"configuration":{"blocking":false}}}`
)

// startCrossSite starts crossSite's doors trusting the pages of trusted
// (FUNDUQ_TRUSTED_ORIGINS).
func startCrossSite(t *testing.T, trusted []string) crossSite {
	t.Helper()
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	deps, err := door.Connect(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity,
		DoorLimits: config.DoorLimits{TrustedOrigins: trusted}},
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
	return crossSite{h: h, p: p, srv: srv, post: post, runs: runs}
}

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
	d := startCrossSite(t, nil)
	h, p, srv, post, runs := d.h, d.p, d.srv, d.post, d.runs
	aguiBody, a2aBody := crossSiteAGUIBody, crossSiteA2ABody
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

// A deployment that answers CORS in front of the doors (API Gateway's
// CORS settings) for its own web app names that app's origin in
// FUNDUQ_TRUSTED_ORIGINS: the app's browser POSTs are served on both
// doors, and a page of any other origin is still refused.
func TestOutsideTrustedOriginMayPost(t *testing.T) {
	d := startCrossSite(t, []string{"https://app.example"})
	for _, path := range []string{"/agui/" + d.p.Key + "/echo", "/a2a/" + d.p.Key + "/echo"} {
		resp, b := d.post(path, "text/plain", crossSiteAGUIBody, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"})
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(b, "cross_origin_refused") {
			t.Fatalf("POST %s from an untrusted origin: %d %.200s; want 403 cross_origin_refused", path, resp.StatusCode, b)
		}
	}
	trusted := map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://app.example"}
	resp, b := d.post("/agui/"+d.p.Key+"/echo", "application/json", crossSiteAGUIBody, trusted)
	if resp.StatusCode != http.StatusOK || b != "" {
		t.Fatalf("AG-UI POST from the trusted origin: %d %.200s", resp.StatusCode, b)
	}
	f := d.p.Offer()
	d.p.Accept(f.RunID)
	d.p.Complete(f.RunID, *f.ThreadID)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d.h.WaitStatus(f.RunID, runstatus.Completed)

	resp, b = d.post("/a2a/"+d.p.Key+"/echo", "application/json", crossSiteA2ABody, trusted)
	if resp.StatusCode != http.StatusOK || !strings.Contains(b, `"result"`) {
		t.Fatalf("A2A POST from the trusted origin: %d %.200s", resp.StatusCode, b)
	}
	if n := d.runs(); n != 2 {
		t.Fatalf("the trusted origin's two posts wrote %d runs", n)
	}
}
