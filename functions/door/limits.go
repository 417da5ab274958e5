package door

import (
	"errors"
	"net/http"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/strictjson"
)

// Limits returns l with every unset (zero or negative) limit at its
// default, so a door built without a parsed configuration is bounded too.
func Limits(l config.DoorLimits) config.DoorLimits {
	d := config.DefaultDoorLimits()
	if l.MaxBody <= 0 {
		l.MaxBody = d.MaxBody
	}
	if l.MaxKyokBody <= 0 {
		l.MaxKyokBody = d.MaxKyokBody
	}
	if l.MaxMessages <= 0 {
		l.MaxMessages = d.MaxMessages
	}
	if l.MaxJSONDepth <= 0 {
		l.MaxJSONDepth = d.MaxJSONDepth
	}
	if l.MaxQueuedPerThread <= 0 {
		l.MaxQueuedPerThread = d.MaxQueuedPerThread
	}
	return l
}

// CheckBody refuses a request body that strictjson refuses — not JSON,
// invalid UTF-8, a repeated key in any object, nesting deeper than
// maxDepth — as 400 malformed_json naming which. Nothing is read from a
// body before it passes, so every door parses exactly what a strict reader
// would.
func CheckBody(body []byte, maxDepth int) *Error {
	err := strictjson.Check(body, maxDepth)
	if err == nil {
		return nil
	}
	msg := "the body is not valid JSON"
	switch {
	case errors.Is(err, strictjson.ErrInvalidUTF8):
		msg = "the body is not valid UTF-8"
	case errors.Is(err, strictjson.ErrDuplicateKey):
		msg = "the body repeats a key in one object: " + err.Error()
	case errors.Is(err, strictjson.ErrTooDeep):
		msg = "the body is " + err.Error()
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: msg, Err: err}
}

// MaxHeaderBytes bounds a request's headers, request line and query
// included, on a server that mounts the doors (larger is 431). API Gateway
// and Function URLs enforce their own, smaller bounds.
const MaxHeaderBytes = 64 << 10
