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
)

//go:embed static
var static embed.FS

// CSP is the chat page's Content-Security-Policy.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Patterns are the routes the page answers on a doors mux.
func Patterns() []string { return []string{"GET /chat", "GET /chat/{file}"} }

var files = map[string]string{
	"":            "text/html; charset=utf-8",
	"chat.js":     "text/javascript; charset=utf-8",
	"chat.css":    "text/css; charset=utf-8",
	"favicon.svg": "image/svg+xml",
}

// Handler serves the page and its two assets.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		ct, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		path := "static/" + name
		if name == "" {
			path = "static/chat.html"
		}
		b, err := static.ReadFile(path)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		hd := w.Header()
		hd.Set("Content-Type", ct)
		hd.Set("Content-Security-Policy", CSP)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "no-referrer")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
	})
}
