// Package console is the broker node's read-only operator console at
// /console: who leads (epoch, lease time left, the nodes seen), the
// connected providers with their agents, capacity and in-flight counts,
// quality counters with withdrawn providers marked, runs by status with the
// oldest queued and the longest running, and recent failures by reason and
// whose words each is (funduq's or the provider's; design.md §Counters).
//
// It is one static page (HTML, CSS and a small script, embedded) that polls
// GET /console/api/state. Every value is rendered with textContent; text a
// provider chose (its name, a refusal reason) is shown to 120 characters,
// whole in the cell's title, and a provider's agents to the first eight and
// their count, so that no provider can push the other columns or rows out
// of sight. The page is served under a Content-Security-Policy that allows only its own
// script and style. Access is a bearer token (FUNDUQ_CONSOLE_TOKEN):
// scripts send "Authorization: Bearer <token>"; a browser posts the token
// once to the login form, which sets an HttpOnly, SameSite=Strict cookie
// that lets in for twelve hours: it carries its expiry and an HMAC of it
// keyed by the token, so the node refuses it after that time even from a
// copy, and at once under another token.
// Every console path wants the token: a request without it may load only the
// login page (the form and nothing of the console), post the form, log out,
// and fetch the login page's style and icon; anything else is a bare 401,
// naming no path, setting or state — the console faces the load balancer on
// AWS hosts (docs/design.md §Deployment). Without a token configured the
// console is off: every path is the node's plain 404, and the node logs
// once, as it starts, that the console is off and why.
//
// A standby serves the console too: it shows who leads, and the providers
// the leader's roster serves as the database records them (capacity and
// in-flight counts live only in the leader's memory).
package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/core/store"
)

//go:embed static
var static embed.FS

// CookieName is the console's session cookie.
const CookieName = "funduq_console"

// SessionTTL is how long a login lets in.
const SessionTTL = 12 * time.Hour

// DefaultFailureWindow is how far back "recent failures" reach.
const DefaultFailureWindow = time.Hour

// CSP is the Content-Security-Policy of every console response: nothing but
// the console's own script, style and API.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Options are what the console reads. Token "" turns it off.
type Options struct {
	Token string
	Store *store.Store
	Redis redis.UniversalClient
	// Broker is this node's broker: its roster is the truth while it leads.
	Broker *broker.Broker
	// LeaseKey is the lease's Redis key; NodesKey the hash nodes announce
	// themselves in (see Announce).
	LeaseKey string
	NodesKey string
	LeaseTTL time.Duration
	// NodeID and AdvertiseURL name this node.
	NodeID       string
	AdvertiseURL string
	// Tolerance is the quality counter level that withdraws a provider.
	Tolerance     int
	FailureWindow time.Duration
	Log           *slog.Logger
	// Clock dates the login cookie (nil: the real clock).
	Clock clockwork.Clock
}

// Handler serves /console and everything under it.
type Handler struct {
	o     Options
	mux   *http.ServeMux
	login *template.Template
}

// New builds the console.
func New(o Options) *Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.FailureWindow <= 0 {
		o.FailureWindow = DefaultFailureWindow
	}
	h := &Handler{o: o, mux: http.NewServeMux()}
	if o.Token == "" {
		// Said here, once, not to whoever asks: a stranger learns no more
		// than from any path the node does not serve.
		o.Log.Info("operator console off: FUNDUQ_CONSOLE_TOKEN is not set (on AWS hosts it comes from the funduq secret's console_token key)")
		h.mux.HandleFunc("/", http.NotFound)
		return h
	}
	h.login = template.Must(template.ParseFS(static, "static/login.html"))

	cop := http.NewCrossOriginProtection()
	h.mux.HandleFunc("GET /console", h.page)
	h.mux.HandleFunc("GET /console/{$}", h.page)
	h.mux.Handle("POST /console/login", cop.Handler(http.HandlerFunc(h.postLogin)))
	h.mux.Handle("POST /console/logout", cop.Handler(http.HandlerFunc(h.logout)))
	h.mux.HandleFunc("GET /console/api/state", h.state)
	h.mux.HandleFunc("GET /console/static/{file}", h.asset)
	// No catch-all: the mux answers an unknown page 404 and a known one
	// asked with another method 405 naming the methods it takes (a
	// catch-all would answer both "no such page").
	return h
}

// Patterns are the paths the node mounts the console on.
func Patterns() []string { return []string{"/console", "/console/"} }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	if h.o.Token != "" && !open(r) && !h.authorized(r) {
		// Before the mux: a stranger learns neither which paths exist
		// (404) nor which methods they take (405).
		refuse(w)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// open are the requests a stranger may make: the login page, its form,
// logging out (it only clears the cookie), and the login page's style and
// icon. Everything else under /console wants the token.
func open(r *http.Request) bool {
	get := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch r.URL.Path {
	case "/console", "/console/", "/console/static/console.css", "/console/static/favicon.svg":
		return get
	case "/console/login", "/console/logout":
		return r.Method == http.MethodPost
	}
	return false
}

// refuse answers a request without the token: 401, and nothing about the
// console.
func refuse(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "unauthorized"})
}

// authorized: a matching bearer token, or the session cookie.
func (h *Handler) authorized(r *http.Request) bool {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, ok := strings.Cut(auth, " ")
		return ok && strings.EqualFold(scheme, "Bearer") && h.tokenMatches(strings.TrimSpace(tok))
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		return false
	}
	exp, mac, ok := strings.Cut(c.Value, ".")
	until, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || h.o.Clock.Now().Unix() >= until {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(mac), []byte(h.sessionMAC(until))) == 1
}

// session is a login cookie's value: its expiry (unix seconds) and an HMAC
// of it keyed by the token, never the token. The node checks the expiry
// itself — Max-Age is only the browser's to honour — and a new token
// refuses every cookie made under the old one.
func (h *Handler) session() string {
	until := h.o.Clock.Now().Add(SessionTTL).Unix()
	return fmt.Sprintf("%d.%s", until, h.sessionMAC(until))
}

func (h *Handler) sessionMAC(until int64) string {
	mac := hmac.New(sha256.New, []byte(h.o.Token))
	fmt.Fprintf(mac, "funduq console session v2\x00%d", until)
	return hex.EncodeToString(mac.Sum(nil))
}

// tokenMatches compares in constant time (hashes first, so the length of
// the configured token does not show either).
func (h *Handler) tokenMatches(given string) bool {
	a, b := sha256.Sum256([]byte(given)), sha256.Sum256([]byte(h.o.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		h.showLogin(w, http.StatusOK, false)
		return
	}
	b, _ := static.ReadFile("static/console.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

func (h *Handler) showLogin(w http.ResponseWriter, status int, failed bool) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = h.login.Execute(w, struct{ Failed bool }{failed})
}

func (h *Handler) postLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil || !h.tokenMatches(r.PostForm.Get("token")) {
		h.o.Log.Warn("console: login refused", "remote", r.RemoteAddr)
		h.showLogin(w, http.StatusUnauthorized, true)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: h.session(), Path: "/console", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r), MaxAge: int(SessionTTL / time.Second)})
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/console", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r), MaxAge: -1})
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}

// secure: the browser reached us over TLS (directly or through a proxy).
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

var assets = map[string]string{
	"console.js":  "text/javascript; charset=utf-8",
	"console.css": "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// asset serves the page's script, style and icon (the style and icon also
// to a stranger: the login page uses them; see open).
func (h *Handler) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	ct, ok := assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	b, _ := static.ReadFile("static/" + name)
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

func (h *Handler) state(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) { // ServeHTTP refused it already; kept should a route move
		refuse(w)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	writeJSON(w, http.StatusOK, h.collect(ctx))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
