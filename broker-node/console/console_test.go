package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/console"
	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/wire"
)

const token = "console-token-for-tests-0123456789"

func withToken(c *config.Broker) { c.ConsoleToken = token }

// withManyAgents is withToken on a node that lets one register carry n
// agents of ~110 bytes, past the default, as an operator may allow
// (FUNDUQ_MAX_AGENTS_PER_REGISTER): the console stays bounded whatever the
// limits are.
func withManyAgents(n int) func(*config.Broker) {
	return func(c *config.Broker) {
		withToken(c)
		c.MaxAgentsPerRegister, c.MaxRegisterBytes = n, n*256
	}
}

// noRedirect is a client that shows redirects instead of following them.
var noRedirect = &http.Client{Timeout: 20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func get(t *testing.T, u string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, req)
}

// state reads the console's JSON with the bearer token.
func state(t *testing.T, base string) console.State {
	t.Helper()
	resp, body := get(t, base+"/console/api/state", "Authorization", "Bearer "+token)
	var s console.State
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &s) != nil {
		t.Fatalf("state: %d %s", resp.StatusCode, body)
	}
	return s
}

// Without FUNDUQ_CONSOLE_TOKEN the console is off: every console path is
// the node's plain 404, the same answer as a path the node never served, so
// a stranger reaching a host through the load balancer learns nothing of its
// settings (the node says why in its log instead, once, as it starts).
func TestConsoleOff(t *testing.T) {
	var logs lockedBuffer
	h := nodetest.StartWith(t, nil, func(o *node.Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	_, unknown := get(t, h.URL+"/no-such-path")
	for _, p := range []string{"/console", "/console/", "/console/api/state", "/console/static/console.js"} {
		resp, body := get(t, h.URL+p, "Authorization", "Bearer "+token)
		if resp.StatusCode != 404 || body != unknown || strings.Contains(body, "FUNDUQ_CONSOLE_TOKEN") {
			t.Fatalf("%s: %d %q, want 404 %q", p, resp.StatusCode, body, unknown)
		}
	}
	// The operator reads why in the node's log: once, from its start, not per request.
	if n := strings.Count(logs.String(), `"msg":"operator console off: FUNDUQ_CONSOLE_TOKEN is not set`); n != 1 {
		t.Fatalf("the node logged that the console is off %d times, want once:\n%s", n, logs.String())
	}
}

// lockedBuffer collects a node's log lines, written from its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A stranger — no token, a wrong one, a forged cookie — who reaches a
// node's console the way the load balancer does (its X-Forwarded-* headers,
// the node's one listener) gets a bare 401 on every console path, known or
// not, whatever the method: the state, the page's script, the API, the
// other pages, naming no setting and no path. Only the login page (the
// form, no script), its style and its icon are served without the token.
func TestConsoleRefusesStrangers(t *testing.T) {
	h := nodetest.Start(t, withToken)
	// Each request from an address of its own: a wrong token costs its
	// client a guess (TestConsoleBoundsGuesses), and this is what any
	// stranger sees, not one out of guesses.
	n := 0
	alb := func() []string {
		n++
		return []string{"X-Forwarded-For", fmt.Sprintf("203.0.113.%d", n), "X-Forwarded-Proto", "https", "X-Forwarded-Port", "443"}
	}
	strangers := map[string][]string{
		"no credential":  nil,
		"a wrong bearer": {"Authorization", "Bearer " + token + "x"},
		"a forged cookie": {"Cookie", console.CookieName + "=" + fmt.Sprint(time.Now().Add(time.Hour).Unix()) +
			".0000000000000000000000000000000000000000000000000000000000000000"},
		"the token as a cookie": {"Cookie", console.CookieName + "=" + token},
		"basic auth":            {"Authorization", "Basic " + token},
	}
	refused := []struct{ method, path string }{
		{"GET", "/console/api/state"}, {"HEAD", "/console/api/state"}, {"POST", "/console/api/state"},
		{"GET", "/console/static/console.js"}, {"GET", "/console/static/console.html"}, {"GET", "/console/static/login.html"},
		{"GET", "/console/static/nope.js"}, {"GET", "/console/static/"}, {"GET", "/console/nope"}, {"GET", "/console/api/"},
		{"GET", "/console/login"}, {"PUT", "/console"}, {"DELETE", "/console/"}, {"GET", "/console/logout"},
		{"GET", "/console/api/state?token=" + token}, {"GET", "/console/api/state?access_token=" + token},
	}
	for who, hdr := range strangers {
		for _, c := range refused {
			req, _ := http.NewRequest(c.method, h.URL+c.path, nil)
			for hd, i := alb(), 0; i+1 < len(hd); i += 2 {
				req.Header.Set(hd[i], hd[i+1])
			}
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, body := do(t, req)
			want := `{"error":"unauthorized"}` + "\n"
			if c.method == "HEAD" {
				want = ""
			}
			if resp.StatusCode != 401 || body != want || resp.Header.Get("Allow") != "" || len(resp.Cookies()) != 0 {
				t.Errorf("%s, %s %s: %d Allow %q %q, want 401 %q", who, c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), body, want)
			}
		}
		// The login page: the form, under the console's headers, nothing of the console itself.
		resp, body := get(t, h.URL+"/console", append(alb(), hdr...)...)
		if resp.StatusCode != 200 || !strings.Contains(body, `name="token"`) || strings.Contains(body, "console.js") ||
			resp.Header.Get("Content-Security-Policy") != console.CSP {
			t.Errorf("%s, the login page: %d %s", who, resp.StatusCode, body)
		}
		for _, p := range []string{"/console/static/console.css", "/console/static/favicon.svg"} {
			if resp, _ := get(t, h.URL+p, append(alb(), hdr...)...); resp.StatusCode != 200 {
				t.Errorf("%s, %s (the login page's): %d", who, p, resp.StatusCode)
			}
		}
	}
	// The same paths with the token are served (or the mux's own 404/405).
	for _, c := range []struct {
		method, path string
		status       int
	}{{"GET", "/console/static/console.js", 200}, {"GET", "/console/nope", 404}, {"GET", "/console/login", 405}} {
		req, _ := http.NewRequest(c.method, h.URL+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, _ := do(t, req); resp.StatusCode != c.status {
			t.Errorf("with the token, %s %s: %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
	}
}

// The JSON wants the bearer token (compared whole); the login form sets an
// HttpOnly, SameSite=Strict cookie that is not the token; the page carries
// a strict CSP; a cross-origin login post is refused.
func TestConsoleAccess(t *testing.T) {
	h := nodetest.Start(t, withToken)
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Bearer " + token[:len(token)-1], "Basic " + token} {
		resp, body := get(t, h.URL+"/console/api/state", "Authorization", auth)
		if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("%q: %d %s", auth, resp.StatusCode, body)
		}
	}
	s := state(t, h.URL)
	if s.Node.Role != "leader" || s.Leader.NodeID != "test-node" || s.Leader.Epoch < 1 || s.Leader.LeaseHolder != "test-node" ||
		s.Leader.LeaseLeftMS <= 0 || s.Providers.Source != "roster" {
		t.Fatalf("state %+v", s)
	}

	resp, body := get(t, h.URL+"/console")
	if resp.StatusCode != 200 || !strings.Contains(body, `name="token"`) || strings.Contains(body, "console.js") {
		t.Fatalf("unauthenticated page: %d %s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); csp != console.CSP || !strings.Contains(csp, "script-src 'self'") {
		t.Fatalf("CSP %q", csp)
	}
	login := func(tok string, hdr ...string) *http.Response {
		req, _ := http.NewRequest("POST", h.URL+"/console/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, _ := do(t, req)
		return resp
	}
	if r := login("wrong"); r.StatusCode != 401 || len(r.Cookies()) != 0 {
		t.Fatalf("wrong token: %d %v", r.StatusCode, r.Cookies())
	}
	if r := login(token, "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"); r.StatusCode != 403 || len(r.Cookies()) != 0 {
		t.Fatalf("cross-origin login: %d %v", r.StatusCode, r.Cookies())
	}
	r := login(token)
	if r.StatusCode != 303 || r.Header.Get("Location") != "/console" || len(r.Cookies()) != 1 {
		t.Fatalf("login: %d %v", r.StatusCode, r.Cookies())
	}
	c := r.Cookies()[0]
	if c.Name != console.CookieName || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" ||
		strings.Contains(c.Value, token) {
		t.Fatalf("cookie %+v", c)
	}
	req, _ := http.NewRequest("GET", h.URL+"/console/api/state", nil)
	req.AddCookie(c)
	if resp, body := do(t, req); resp.StatusCode != 200 {
		t.Fatalf("state with the cookie: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", h.URL+"/console", nil)
	req.AddCookie(c)
	if resp, body := do(t, req); resp.StatusCode != 200 || !strings.Contains(body, "/console/static/console.js") {
		t.Fatalf("page with the cookie: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("GET", h.URL+"/console/api/state", nil)
	req.AddCookie(&http.Cookie{Name: console.CookieName, Value: token})
	if resp, _ := do(t, req); resp.StatusCode != 401 {
		t.Fatalf("the raw token as a cookie: %d", resp.StatusCode)
	}
}

// A standby's console shows who leads, both nodes are seen, and the
// providers come from the database (no capacity known there).
func TestConsoleOnStandby(t *testing.T) {
	h := nodetest.Start(t, withToken)
	sb := h.Peer("standby-node")
	p := h.Connect(0xc1, nodetest.Limit(2))
	p.Register("echo")
	var s console.State
	h.Eventually("both nodes seen, each in its role", func() bool {
		s = state(t, sb.URL)
		return len(s.Nodes) == 2 && s.Nodes[1].Role == "leader"
	})
	if s.Node.Role != "standby" || s.Node.ID != "standby-node" || s.Leader.LeaseHolder != "test-node" || s.Leader.AdvertiseURL != h.URL {
		t.Fatalf("standby's view of the leader %+v %+v", s.Node, s.Leader)
	}
	if len(s.Nodes) != 2 || s.Nodes[0].NodeID != "standby-node" || s.Nodes[0].Role != "standby" ||
		s.Nodes[1].NodeID != "test-node" || s.Nodes[1].Role != "leader" {
		t.Fatalf("nodes seen %+v", s.Nodes)
	}
	if s.Providers.Source != "database" || len(s.Providers.List) != 1 || s.Providers.List[0].Key != p.Key ||
		strings.Join(s.Providers.List[0].Agents, ",") != "echo" || s.Providers.List[0].InFlight != nil {
		t.Fatalf("standby's providers %+v", s.Providers)
	}
	l := state(t, h.URL)
	if len(l.Providers.List) != 1 || l.Providers.List[0].Capacity == nil || *l.Providers.List[0].Capacity != 2 ||
		*l.Providers.List[0].InFlight != 0 {
		t.Fatalf("leader's providers %+v", l.Providers)
	}
	// A node that stops is forgotten at once.
	sb.Shutdown()
	if n := state(t, h.URL).Nodes; len(n) != 1 || n[0].NodeID != "test-node" {
		t.Fatalf("after the standby stopped: %+v", n)
	}
}

// A node that died without removing itself goes stale after its TTL and is
// dropped by the next reader; one that stops removes itself at once.
func TestSeenNodes(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	key := prefix + "broker:nodes"
	ctx := context.Background()
	stale := fmt.Sprintf(`{"nodeId":"gone","role":"leader","at":%d,"ttlMs":1000}`, time.Now().Add(-time.Minute).UnixMilli())
	if err := rdb.HSet(ctx, key, "gone", stale, "junk", "{").Err(); err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		console.Announce(actx, rdb, key, "alive", "http://alive", time.Minute, func() bool { return false }, nil)
	}()
	var seen []console.SeenJSON
	deadline := time.Now().Add(20 * time.Second)
	for len(seen) != 1 && time.Now().Before(deadline) {
		var err error
		if seen, err = console.Seen(ctx, rdb, key); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(seen) != 1 || seen[0].NodeID != "alive" || seen[0].Role != "standby" || seen[0].AdvertiseURL != "http://alive" {
		t.Fatalf("seen %+v", seen)
	}
	if n, _ := rdb.HLen(ctx, key).Result(); n != 1 {
		t.Fatalf("the stale and the malformed entries were not dropped: %d fields", n)
	}
	stop()
	<-done
	if n, _ := rdb.HLen(ctx, key).Result(); n != 0 {
		t.Fatalf("a stopped node left its entry: %d fields", n)
	}
}

// A method the console does not take on one of its routes is answered 405
// naming the methods it takes, with the console's headers — not "no such
// console page", which sends a script's author looking for a wrong path.
func TestConsoleMethods(t *testing.T) {
	h := nodetest.Start(t, withToken)
	for _, c := range []struct{ method, path, allow string }{
		{"POST", "/console/api/state", "GET, HEAD"},
		{"DELETE", "/console/api/state", "GET, HEAD"},
		{"PUT", "/console", "GET, HEAD"},
		{"GET", "/console/login", "POST"},
	} {
		req, _ := http.NewRequest(c.method, h.URL+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, body := do(t, req)
		if resp.StatusCode != 405 || resp.Header.Get("Allow") != c.allow || resp.Header.Get("Content-Security-Policy") != console.CSP ||
			resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: %d Allow %q %v %s", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), resp.Header, body)
		}
	}
	if resp, _ := get(t, h.URL+"/console/nope", "Authorization", "Bearer "+token); resp.StatusCode != 404 || resp.Header.Get("Content-Security-Policy") != console.CSP {
		t.Errorf("an unknown page: %d %v", resp.StatusCode, resp.Header)
	}
}

// The login cookie lets in for its twelve hours, then no more, even when
// its holder keeps sending it (a copy outlives the browser's expiry); and a
// cookie from before a token change does not let in under the new token.
func TestConsoleSessionEnds(t *testing.T) {
	h := nodetest.Start(t, withToken)
	req, _ := http.NewRequest("POST", h.URL+"/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, _ := do(t, req)
	if resp.StatusCode != 303 || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %d %v", resp.StatusCode, resp.Cookies())
	}
	c := resp.Cookies()[0]
	withCookie := func(base string) int {
		req, _ := http.NewRequest("GET", base+"/console/api/state", nil)
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		resp, _ := do(t, req)
		return resp.StatusCode
	}
	if code := withCookie(h.URL); code != 200 {
		t.Fatalf("with a fresh cookie: %d", code)
	}
	other := h.PeerWith("rotated-node", func(cfg *config.Broker) { cfg.ConsoleToken = token + "-rotated" }, nil)
	if code := withCookie(other.URL); code != 401 {
		t.Fatalf("under another token: %d", code)
	}
	h.Clock.Advance(11 * time.Hour)
	if code := withCookie(h.URL); code != 200 {
		t.Fatalf("after 11 hours: %d", code)
	}
	h.Clock.Advance(time.Hour + time.Minute)
	if code := withCookie(h.URL); code != 401 {
		t.Fatalf("after 12 hours: %d", code)
	}
}

// A refusal's reason is the provider's text, up to a frame's size, and
// every distinct one is a row of the failures: a few huge reasons or many
// distinct ones keep the console's answer small — each reason shortened to
// reasonChars, the most frequent failureReasons listed, the
// rest counted — and its counts whole.
const failureReasons, reasonChars = 50, 512

func TestConsoleFailuresBounded(t *testing.T) {
	h := nodetest.Start(t, withToken)
	p := h.Connect(0xc6, nil)
	p.Register("echo")
	refuse := func(reason string) {
		t.Helper()
		id, _ := h.Door(p.Key, "echo", "", "x")
		if f := p.Offer(); f.RunID != id {
			t.Fatalf("offered %s, want %s", f.RunID, id)
		}
		p.Refuse(id, reason)
		h.WaitStatus(id, "failed")
	}
	for i := range 3 {
		refuse(fmt.Sprintf("huge-%d-%s", i, strings.Repeat("R", 2<<20)))
	}
	for i := range failureReasons + 5 {
		refuse(fmt.Sprintf("distinct-%03d", i))
	}
	refuse("distinct-000") // the most frequent: listed first

	resp, body := get(t, h.URL+"/console/api/state", "Authorization", "Bearer "+token)
	if resp.StatusCode != 200 || len(body) > 64<<10 {
		t.Fatalf("state: %d, %d bytes", resp.StatusCode, len(body))
	}
	var s struct {
		Failures struct {
			List           []console.FailureJSON `json:"list"`
			OmittedRuns    int64                 `json:"omittedRuns"`
			OmittedReasons int64                 `json:"omittedReasons"`
		} `json:"failures"`
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatal(err)
	}
	f := s.Failures
	if len(f.List) != failureReasons || f.List[0].Reason != "distinct-000" || f.List[0].Count != 2 {
		t.Fatalf("%d reasons listed, first %+v", len(f.List), f.List[0])
	}
	listed := int64(0)
	for _, r := range f.List {
		listed += r.Count
		if n := len([]rune(r.Reason)); n > reasonChars {
			t.Fatalf("a reason of %d characters", n)
		}
	}
	total := int64(3 + failureReasons + 5 + 1)
	if listed+f.OmittedRuns != total || f.OmittedReasons != int64(3+failureReasons+5)-int64(len(f.List)) {
		t.Fatalf("listed %d runs, omitted %d runs in %d reasons; want %d runs in all", listed, f.OmittedRuns, f.OmittedReasons, total)
	}
}

// A provider's name and its agents are its own choice, up to a frame: the
// console's state stays small whatever it registers — the name shortened
// to reasonChars, the first agentsListed agents listed and all counted.
const agentsListed = 100

func TestConsoleProviderBounded(t *testing.T) {
	h := nodetest.Start(t, withManyAgents(3000))
	var regs []wire.Registration
	for i := range 3000 {
		regs = append(regs, wire.Registration{Name: fmt.Sprintf("agent-%04d-%s", i, strings.Repeat("x", 100))})
	}
	name := strings.Repeat("N", broker.MaxProviderNameBytes)
	p := h.Connect(0xc7, nil)
	p.Send(wire.Register{Type: wire.TypeRegister, ProviderName: name, Agents: regs})
	p.Expect(wire.TypeRegistered, nil)
	sb := h.Peer("standby-node")
	for _, base := range []string{h.URL, sb.URL} {
		resp, body := get(t, base+"/console/api/state", "Authorization", "Bearer "+token)
		if resp.StatusCode != 200 || len(body) > 64<<10 {
			t.Fatalf("%s state: %d, %d bytes", base, resp.StatusCode, len(body))
		}
		var s struct {
			Providers struct {
				List []struct {
					Name       string   `json:"name"`
					Agents     []string `json:"agents"`
					AgentCount int      `json:"agentCount"`
				} `json:"list"`
			} `json:"providers"`
		}
		if err := json.Unmarshal([]byte(body), &s); err != nil {
			t.Fatal(err)
		}
		if len(s.Providers.List) != 1 {
			t.Fatalf("%s providers %d", base, len(s.Providers.List))
		}
		pv := s.Providers.List[0]
		if pv.Name != name || len(pv.Agents) != agentsListed || pv.Agents[0] != regs[0].Name || pv.AgentCount != len(regs) {
			t.Fatalf("%s: name of %d, %d agents listed of %d", base, len(pv.Name), len(pv.Agents), pv.AgentCount)
		}
	}
}

// login posts the token to the form and returns the session cookie.
func login(t *testing.T, base string) *http.Cookie {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, _ := do(t, req)
	if resp.StatusCode != 303 || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %d %v", resp.StatusCode, resp.Cookies())
	}
	return resp.Cookies()[0]
}

// Logging out ends the session on every node, not only in the browser
// that clears its cookie: a copy of the cookie taken before (from a
// shared machine, a proxy's log) lets in no more, on the leader or a
// standby; another login's session is untouched.
func TestConsoleLogoutEndsTheSession(t *testing.T) {
	h := nodetest.Start(t, withToken)
	sb := h.Peer("standby-node")
	c := login(t, h.URL)
	other := login(t, h.URL) // the same instant: a session of its own all the same
	withCookie := func(base string, c *http.Cookie) int {
		req, _ := http.NewRequest("GET", base+"/console/api/state", nil)
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		resp, _ := do(t, req)
		return resp.StatusCode
	}
	if code := withCookie(h.URL, c); code != 200 {
		t.Fatalf("before logging out: %d", code)
	}
	req, _ := http.NewRequest("POST", h.URL+"/console/logout", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, _ := do(t, req)
	if resp.StatusCode != 303 || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 {
		t.Fatalf("logout: %d %v", resp.StatusCode, resp.Cookies())
	}
	for _, base := range []string{h.URL, sb.URL} {
		if code := withCookie(base, c); code != 401 {
			t.Errorf("%s: the logged-out cookie's copy: %d, want 401", base, code)
		}
		if code := withCookie(base, other); code != 200 {
			t.Errorf("%s: another login's cookie: %d, want 200", base, code)
		}
	}
}

// The login page a stranger loads is the form and nothing more: it names
// neither the node's setting nor the console's API (docs/design.md
// §Deployment: the console faces the internet on AWS).
func TestConsoleLoginPageSaysNothing(t *testing.T) {
	h := nodetest.Start(t, withToken)
	for _, fail := range []bool{false, true} {
		var resp *http.Response
		var body string
		if fail {
			req, _ := http.NewRequest("POST", h.URL+"/console/login", strings.NewReader("token=wrong-token-wrong-token"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, body = do(t, req)
		} else {
			resp, body = get(t, h.URL+"/console")
		}
		if !strings.Contains(body, `name="token"`) {
			t.Fatalf("the login page (failed %v): %d %s", fail, resp.StatusCode, body)
		}
		for _, secret := range []string{"FUNDUQ_", "/console/api", "Bearer", "Authorization"} {
			if strings.Contains(body, secret) {
				t.Errorf("the login page (failed %v) names %q:\n%s", fail, secret, body)
			}
		}
	}
}

// With Redis out of reach, a logged-in operator still gets in (the console
// is wanted most while a store is down), and logging out clears the
// browser's cookie but says plainly that a copy of it still lets in.
func TestConsoleLogoutWithoutRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	srv := httptest.NewServer(console.New(console.Options{Token: token, Redis: rdb, EndedKey: "ended:"}))
	t.Cleanup(srv.Close)
	c := login(t, srv.URL)
	req, _ := http.NewRequest("GET", srv.URL+"/console", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	if resp, body := do(t, req); resp.StatusCode != 200 || !strings.Contains(body, "console.js") {
		t.Fatalf("the page with the cookie, Redis down: %d %s", resp.StatusCode, body)
	}
	req, _ = http.NewRequest("POST", srv.URL+"/console/logout", nil)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, body := do(t, req)
	if resp.StatusCode != 503 || len(resp.Cookies()) != 1 || resp.Cookies()[0].MaxAge >= 0 ||
		!strings.Contains(body, "a copy of its cookie lets in until") {
		t.Fatalf("logout, Redis down: %d %v %q", resp.StatusCode, resp.Cookies(), body)
	}
}

// A stranger's guesses at the token are bounded: after console.GuessBurst
// wrong tokens from one client (the address the load balancer appends to
// X-Forwarded-For), whether posted to the form or sent as a bearer, it is
// answered 429 — even with the right token, which it is then not even
// compared with — until its budget refills (console.GuessesPerMinute).
// Right tokens cost nothing; another client, and an operator already
// logged in, are not held up.
func TestConsoleBoundsGuesses(t *testing.T) {
	h := nodetest.Start(t, withToken)
	operator := login(t, h.URL)
	const attacker = "198.51.100.9"
	guess := func(client, tok string, bearer bool) (*http.Response, string) {
		t.Helper()
		var req *http.Request
		if bearer {
			req, _ = http.NewRequest("GET", h.URL+"/console/api/state", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
		} else {
			req, _ = http.NewRequest("POST", h.URL+"/console/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		// What the load balancer sends: what the client claimed, then its address.
		req.Header.Set("X-Forwarded-For", "203.0.113.1, "+client)
		return do(t, req)
	}
	// A right token costs nothing: a script with many requests in flight at
	// once is not held up.
	var wg sync.WaitGroup
	codes := make([]int, 3*console.GuessBurst)
	for i := range codes {
		wg.Go(func() { resp, _ := guess(attacker, token, true); codes[i] = resp.StatusCode })
	}
	wg.Wait()
	for i, code := range codes {
		if code != 200 {
			t.Fatalf("the right token, request %d of %d at once: %d, want 200", i, len(codes), code)
		}
	}
	for i := range console.GuessBurst {
		if resp, _ := guess(attacker, fmt.Sprintf("wrong-guess-%04d-wrong", i), i%2 == 0); resp.StatusCode != 401 {
			t.Fatalf("wrong guess %d: %d, want 401", i, resp.StatusCode)
		}
	}
	for _, bearer := range []bool{false, true} {
		resp, body := guess(attacker, token, bearer)
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || len(resp.Cookies()) != 0 || strings.Contains(body, "providers") {
			t.Fatalf("the right token (bearer %v) after %d wrong ones: %d Retry-After %q %v %s, want 429",
				bearer, console.GuessBurst, resp.StatusCode, resp.Header.Get("Retry-After"), resp.Cookies(), body)
		}
	}
	if resp, _ := guess("192.0.2.44", token, false); resp.StatusCode != 303 {
		t.Fatalf("another client with the right token: %d, want 303", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", h.URL+"/console/api/state", nil)
	req.Header.Set("X-Forwarded-For", attacker)
	req.AddCookie(&http.Cookie{Name: operator.Name, Value: operator.Value})
	if resp, _ := do(t, req); resp.StatusCode != 200 {
		t.Fatalf("a logged-in operator from the throttled address: %d, want 200", resp.StatusCode)
	}
	// The budget refills at GuessesPerMinute: one guess's worth later, one more is compared.
	h.Clock.Advance(time.Minute / console.GuessesPerMinute)
	if resp, _ := guess(attacker, token, true); resp.StatusCode != 200 {
		t.Fatalf("the right token once the budget refilled: %d, want 200", resp.StatusCode)
	}
}

// The login cookie is Secure when the browser came over HTTPS (the load
// balancer says so in X-Forwarded-Proto), and only then: over plain HTTP
// (Session Manager port forwarding to localhost) a Secure cookie would not
// come back.
func TestConsoleCookieSecureBehindHTTPS(t *testing.T) {
	h := nodetest.Start(t, withToken)
	for _, proto := range []string{"https", "http", ""} {
		req, _ := http.NewRequest("POST", h.URL+"/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		resp, _ := do(t, req)
		if resp.StatusCode != 303 || len(resp.Cookies()) != 1 || resp.Cookies()[0].Secure != (proto == "https") {
			t.Errorf("login, X-Forwarded-Proto %q: %d %v", proto, resp.StatusCode, resp.Cookies())
		}
	}
}
