// Package chat is the caller chat page the local doors server mounts at
// /chat, for local use and demos: pick an agent from GET /agents, talk to
// it over the AG-UI door (POST /agui/{provider}/{name}, read as a fetch
// stream), watch its events arrive, answer an interrupt (an AG-UI resume),
// and, after a reload, reconnect to the run with GET /runs/{runId}/events
// and Last-Event-ID (the thread id, run id and last seq seen are kept in
// localStorage).
//
// It is a static page (HTML, CSS and one script, embedded; no build step,
// nothing fetched from elsewhere). Everything it shows — agent names,
// messages, event payloads — is set with textContent, and it is served
// under a Content-Security-Policy that allows only its own script, style
// and same-origin requests.
package chat

import (
	"embed"
	"net/http"
	"strings"
)

//go:embed static
var static embed.FS

// CSP is the chat page's Content-Security-Policy.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Patterns are the routes the page answers on a doors mux: everything
// under /chat, whatever the method, so that every answer there — a 404 for
// a file the page does not have, a 405 for a method it does not take —
// carries the page's security headers, not only the page itself.
func Patterns() []string { return []string{"/chat", "/chat/"} }

var files = map[string]string{
	"/chat":             "text/html; charset=utf-8",
	"/chat/chat.js":     "text/javascript; charset=utf-8",
	"/chat/chat.css":    "text/css; charset=utf-8",
	"/chat/favicon.svg": "image/svg+xml",
}

// Handler serves the page and its assets.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-cache")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			hd.Set("Allow", "GET, HEAD")
			http.Error(w, "the chat page answers only GET", http.StatusMethodNotAllowed)
			return
		}
		ct, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		path := "static/" + strings.TrimPrefix(r.URL.Path, "/chat/")
		if r.URL.Path == "/chat" {
			path = "static/chat.html"
		}
		b, err := static.ReadFile(path)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		hd.Set("Content-Type", ct)
		_, _ = w.Write(b)
	})
}
