package wsconn

import (
	"net/http"
	"strings"

	"github.com/funduq/funduq-go/core/apierr"
)

// RefuseUpgrade is a websocket.Upgrader's Error for the links' paths: a
// request that cannot be upgraded is answered in funduq's one error body
// (core/apierr, design.md §The provider wire) with gorilla's reason, which
// says what is missing, instead of gorilla's bare status text.
func RefuseUpgrade(w http.ResponseWriter, _ *http.Request, status int, reason error) {
	code := apierr.CodeInternal
	switch status {
	case http.StatusBadRequest:
		code = apierr.CodeBadRequest
	case http.StatusMethodNotAllowed:
		code = apierr.CodeMethodNotAllowed
	}
	msg := http.StatusText(status)
	if reason != nil {
		msg = strings.TrimPrefix(reason.Error(), "websocket: ")
	}
	apierr.Write(w, status, apierr.New(code, "%s", "cannot open a link: "+msg))
}

// MethodNotAllowed answers a link's path asked with another method than
// GET, in the same body.
func MethodNotAllowed(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", http.MethodGet)
	apierr.Write(w, http.StatusMethodNotAllowed, apierr.New(apierr.CodeMethodNotAllowed, "method %s not allowed; a link opens with a GET upgrade", r.Method))
}
