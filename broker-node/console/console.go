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
// that lets in for twelve hours: it carries its expiry, a random session id
// and an HMAC of both keyed by the token, so the node refuses it after that
// time even from a copy, and at once under another token. Logging out ends
// the session on every node (its id is kept in Redis until it would have
// expired), so a copy of the cookie lets in no more either.
// Guesses at the token are bounded per client: ten, then ten a minute, a
// client past them answered 429 without its token compared (guesses.go).
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
	"crypto/rand"
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

// GuessBurst wrong tokens one client may send at once, and
// GuessesPerMinute more a minute after that: past them its tokens are not
// compared but answered 429 (see guesses).
const (
	GuessBurst       = 10
	GuessesPerMinute = 10
)

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
	// EndedKey prefixes the Redis keys of the sessions logged out before
	// their time (one key per session, expiring with it).
	EndedKey string
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
	o       Options
	mux     *http.ServeMux
	login   *template.Template
	guesses *guesses
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
	h := &Handler{o: o, mux: http.NewServeMux(),
		guesses: &guesses{now: o.Clock.Now, log: o.Log, clients: map[string]*guesser{}}}
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
	if h.o.Token != "" {
		ok, retry := h.check(r)
		if retry > 0 {
			tooMany(w, retry)
			return
		}
		if !open(r) && !ok {
			// Before the mux: a stranger learns neither which paths exist
			// (404) nor which methods they take (405).
			refuse(w)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), authorizedKey{}, ok))
	}
	h.mux.ServeHTTP(w, r)
}

// authorizedKey holds ServeHTTP's check: a bearer token is compared once
// per request, and a wrong one costs one guess (see guesses).
type authorizedKey struct{}

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

// tooMany answers a client out of token guesses; its token was not compared.
func tooMany(w http.ResponseWriter, retry time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(retry)))
	writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "too many attempts"})
}

func retrySeconds(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

// authorized is ServeHTTP's check of the request.
func (h *Handler) authorized(r *http.Request) bool {
	ok, _ := r.Context().Value(authorizedKey{}).(bool)
	return ok
}

// check: a matching bearer token, or the session cookie of a session not
// logged out. A wrong bearer token costs its client a guess; a client out
// of guesses gets retry > 0 and its token is not compared.
func (h *Handler) check(r *http.Request) (ok bool, retry time.Duration) {
	if auth := r.Header.Get("Authorization"); auth != "" {
		scheme, tok, found := strings.Cut(auth, " ")
		if !found || !strings.EqualFold(scheme, "Bearer") {
			return false, 0
		}
		who := client(r)
		if retry, ok := h.guesses.allow(who); !ok {
			return false, retry
		}
		if !h.tokenMatches(strings.TrimSpace(tok)) {
			h.guesses.failed(who)
			return false, 0
		}
		return true, 0
	}
	id, _, ok := h.cookieSession(r)
	return ok && !h.ended(r.Context(), id), 0
}

// cookieSession reads the request's login cookie: its session id and
// expiry, ok when its HMAC is this token's and it has not expired.
func (h *Handler) cookieSession(r *http.Request) (id string, until int64, ok bool) {
	c, err := r.Cookie(CookieName)
	if err != nil {
		return "", 0, false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 {
		return "", 0, false
	}
	until, err = strconv.ParseInt(parts[0], 10, 64)
	if err != nil || h.o.Clock.Now().Unix() >= until {
		return "", 0, false
	}
	if subtle.ConstantTimeCompare([]byte(parts[2]), []byte(h.sessionMAC(until, parts[1]))) != 1 {
		return "", 0, false
	}
	return parts[1], until, true
}

// ended: the session was logged out. A session whose state Redis cannot
// tell lets in (logged): the console is wanted most while a store is down,
// and a browser refused there would loop through the login form.
func (h *Handler) ended(ctx context.Context, id string) bool {
	if h.o.Redis == nil || h.o.EndedKey == "" {
		return false
	}
	n, err := h.o.Redis.Exists(ctx, h.o.EndedKey+id).Result()
	if err != nil {
		h.o.Log.Warn("console: cannot tell whether a session was logged out; letting it in", "err", err)
		return false
	}
	return n > 0
}

// session is a new login cookie's value: its expiry (unix seconds), a
// random session id, and an HMAC of both keyed by the token, never the
// token. The node checks the expiry itself — Max-Age is only the browser's
// to honour — and a new token refuses every cookie made under the old one.
func (h *Handler) session() string {
	until := h.o.Clock.Now().Add(SessionTTL).Unix()
	id := rand.Text() // 128 random bits
	return fmt.Sprintf("%d.%s.%s", until, id, h.sessionMAC(until, id))
}

func (h *Handler) sessionMAC(until int64, id string) string {
	mac := hmac.New(sha256.New, []byte(h.o.Token))
	fmt.Fprintf(mac, "funduq console session v3\x00%d\x00%s", until, id)
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
		h.showLogin(w, http.StatusOK, loginPage{})
		return
	}
	b, _ := static.ReadFile("static/console.html")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b)
}

// loginPage is what the login form says besides the form: that the token
// was wrong, or how long to wait before trying another.
type loginPage struct {
	Failed bool
	Wait   int
}

func (h *Handler) showLogin(w http.ResponseWriter, status int, p loginPage) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = h.login.Execute(w, p)
}

func (h *Handler) postLogin(w http.ResponseWriter, r *http.Request) {
	who := client(r)
	if retry, ok := h.guesses.allow(who); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(retry)))
		h.showLogin(w, http.StatusTooManyRequests, loginPage{Wait: retrySeconds(retry)})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil || !h.tokenMatches(r.PostForm.Get("token")) {
		h.guesses.failed(who)
		h.o.Log.Warn("console: login refused", "client", who)
		h.showLogin(w, http.StatusUnauthorized, loginPage{Failed: true})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: h.session(), Path: "/console", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r), MaxAge: int(SessionTTL / time.Second)})
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}

// logout clears the browser's cookie and ends its session on every node:
// the session id is kept in Redis until the cookie would have expired, so
// a copy of the cookie lets in no more. When Redis cannot keep it, the
// operator is told that a copy would still let in until its expiry.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/console", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r), MaxAge: -1})
	if id, until, ok := h.cookieSession(r); ok && h.o.Redis != nil && h.o.EndedKey != "" {
		// Kept as long as the node would take the cookie (by the clock that
		// judges its expiry), and a second more.
		left := time.Unix(until, 0).Sub(h.o.Clock.Now()) + time.Second
		if err := h.o.Redis.Set(r.Context(), h.o.EndedKey+id, 1, left).Err(); err != nil {
			h.o.Log.Error("console: cannot end a session on logout", "err", err)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "Logged out of this browser, but the session could not be ended on the nodes: "+
				"a copy of its cookie lets in until %s.\n", time.Unix(until, 0).UTC().Format(time.RFC3339))
			return
		}
	}
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
