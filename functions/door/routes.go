package door

import (
	"net/http"
	"path"
	"strings"
)

// ServeClean serves r with mux unless r's path, as sent (escaped: an id
// may hold an encoded "/"), is not in its clean form (an empty segment,
// "." or ".."), which it answers as an unknown route:
// net/http's ServeMux would answer such a path with a redirect to the
// cleaned one and a body of HTML — not the error envelope (D13), and a
// POST's 307 would be sent again to a route the caller did not name. A
// caller's path is taken as sent or refused, never rewritten. A CONNECT
// too: the mux does not clean its path, so an authority-form target (no
// path) would get its plain-text 404 and a ".." would reach the handler
// of the prefix it climbs out of; no route serves CONNECT.
func ServeClean(mux http.Handler, w http.ResponseWriter, r *http.Request) {
	if r.URL.EscapedPath() != cleanPath(r.URL.EscapedPath()) {
		NoRoute(w, r)
		return
	}
	mux.ServeHTTP(w, r)
}

// cleanPath is the path ServeMux routes: rooted, without empty, "." or
// ".." segments, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}
