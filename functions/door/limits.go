package door

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"

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
	if l.AgentsHiddenAfter <= 0 {
		l.AgentsHiddenAfter = d.AgentsHiddenAfter
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
		// err is ErrDuplicateKey's text then the key: say it once.
		msg = "the body repeats a key in one object: " + strings.TrimPrefix(err.Error(), strictjson.ErrDuplicateKey.Error()+": ")
	case errors.Is(err, strictjson.ErrTooDeep):
		msg = "the body is " + err.Error()
	}
	return &Error{Status: http.StatusBadRequest, Code: CodeMalformedJSON, Message: msg, Err: err}
}

// MaxHeaderBytes bounds a request's headers, request line and query
// included, on a server that mounts the doors (larger is 431). API Gateway
// and Function URLs enforce their own, smaller bounds.
const MaxHeaderBytes = 64 << 10

// ParseLastEventID reads a resume position (an SSE id: a stored event's
// seq): a non-negative decimal integer of at most 18 digits, surrounding
// space allowed. ok is false for anything else, which the doors refuse.
// A position past the largest seq a run can hold (run_events.seq is a
// 32-bit integer) reads as that largest one: it is after every event, and
// a larger one could never be compared with a seq in the record (the read
// fails, and a stream would retry it for good).
func ParseLastEventID(raw string) (n int, ok bool) {
	raw = strings.TrimSpace(raw)
	if raw == "" || len(raw) > 18 {
		return 0, false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] < '0' || raw[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.Atoi(raw)
	return min(v, MaxSeq), err == nil
}

// MaxSeq is the largest seq a run's event can have (run_events.seq).
const MaxSeq = math.MaxInt32

// MaxCallerID bounds, in bytes, an id a caller chooses that the door keeps
// to recognise a retry (an AG-UI runId and first-turn threadId, an A2A
// messageId): stored in a unique index, a longer one would overflow its
// row and answer 500. Ids are UUIDs and the like; 1 KiB leaves them room.
const MaxCallerID = 1024
