package door

import (
	"fmt"
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
//
// A browser's cross-origin request that is not safe (a POST) is refused
// 403 CodeCrossOrigin before anything is read: the doors send no CORS
// headers, so no page of another origin may call them, yet a form or a
// text/plain fetch is a "simple" request no preflight stops, and the doors
// read any body as JSON — a page on any site could start runs through the
// browser of someone running the local doors (design.md §The doors).
// Programs send neither Sec-Fetch-Site nor Origin and pass, as does the
// chat page, served from the doors' own origin, and a page of an origin
// origins trusts (OriginGuard; nil trusts none).
func ServeClean(mux http.Handler, origins *http.CrossOriginProtection, w http.ResponseWriter, r *http.Request) {
	if r.URL.EscapedPath() != cleanPath(r.URL.EscapedPath()) {
		NoRoute(w, r)
		return
	}
	if origins == nil {
		origins = crossOrigin
	}
	if origins.Check(r) != nil {
		WriteError(w, r, nil, Refuse(http.StatusForbidden, CodeCrossOrigin,
			"a browser's cross-origin %s is refused: funduq's doors serve no page of another origin", r.Method))
		return
	}
	mux.ServeHTTP(w, r)
}

// crossOrigin is Go's check of a browser request's Sec-Fetch-Site (else
// its Origin against its Host), as the console uses it.
var crossOrigin = http.NewCrossOriginProtection()

// OriginGuard is ServeClean's check trusting the pages of trusted
// (config.DoorLimits.TrustedOrigins, validated by the configuration) as
// well: a deployment that answers CORS in front of the doors names the
// origins it answers for.
func OriginGuard(trusted []string) (*http.CrossOriginProtection, error) {
	cop := http.NewCrossOriginProtection()
	for _, o := range trusted {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("trusted origin %q: %w", o, err)
		}
	}
	return cop, nil
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
