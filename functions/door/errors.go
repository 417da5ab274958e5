// Package door holds what every caller door (AG-UI, A2A, KYOK) shares: the
// one error envelope and its mapping to HTTP statuses, the fail-fast
// classification of storage failures, the connections a door opens, and the
// GET /agents listing any door serves.
package door

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/core/apierr"
	"github.com/funduq/funduq-go/core/store"
)

// Error is a typed refusal. Every refusal a door makes is one of these,
// written once as core/apierr's body with Status (D13:
// one error envelope; nothing leaks a stack trace or a driver message).
type Error struct {
	Status  int
	Code    string
	Message string
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int
	// Err is the cause, for logs only; never written to the caller.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s (%d): %s: %v", e.Code, e.Status, e.Message, e.Err)
	}
	return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Refuse makes an *Error.
func Refuse(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error codes shared by the doors.
const (
	CodeBadRequest         = apierr.CodeBadRequest
	CodeMalformedJSON      = "malformed_json"
	CodeInvalidRunInput    = "invalid_run_input"
	CodeBodyTooLarge       = apierr.CodeBodyTooLarge
	CodeAgentNotFound      = "agent_not_found"
	CodeThreadNotFound     = "thread_not_found"
	CodeRunNotFound        = "run_not_found"
	CodeLLMNotFound        = "llm_provider_not_found"
	CodePresenterRequired  = "presenter_required"
	CodeInvalidChain       = "invalid_chain"
	CodeThreadMismatch     = "thread_ownership_mismatch"
	CodeMembershipRequired = "thread_membership_required"
	CodeUnavailable        = apierr.CodeUnavailable
	CodeInternal           = apierr.CodeInternal
	CodeNotFound           = "not_found"
	CodeMethodNotAllowed   = apierr.CodeMethodNotAllowed
	CodeThreadQueueFull    = "thread_queue_full"
	CodeTooManyMessages    = "too_many_messages"
	CodeCrossOrigin        = "cross_origin_refused"
)

// WriteError writes err as the error envelope. An *Error is written as it
// says; a query a stepped-down schema cannot run (SchemaTrouble) becomes
// NotMigrated's 503; a storage failure (see Unavailable) becomes 503 with
// Retry-After; any other error is logged and answered 500 with a generic
// message. A failure
// that is the caller hanging up (CallerGone) is logged as that, not as a
// refusal of funduq's.
func WriteError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	de, ok := Refusal(err)
	if !ok {
		if SchemaTrouble(err) {
			de = NotMigrated(err)
		} else if Unavailable(err) {
			de = &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
				Message: "storage is unreachable; retry shortly", RetryAfter: 1, Err: err}
		} else {
			de = &Error{Status: http.StatusInternalServerError, Code: CodeInternal,
				Message: "internal error", Err: err}
		}
	}
	switch {
	case log == nil:
	case de.Status >= 500 && CallerGone(r, err):
		LogCallerGone(log, r, err)
	default:
		lvl := slog.LevelInfo
		if de.Status >= 500 {
			lvl = slog.LevelError
		}
		log.Log(r.Context(), lvl, "request refused", "method", r.Method, "path", r.URL.Path,
			"status", de.Status, "code", de.Code, "err", de.Error())
	}
	if de.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(de.RetryAfter))
	}
	apierr.Write(w, de.Status, apierr.Body{Error: apierr.Detail{Code: de.Code, Message: de.Message}})
}

// Refusal returns the refusal err stands for: an *Error as it is, and the
// store's answers that are the caller's doing (a full thread queue, text
// PostgreSQL cannot hold). ok is false for anything else: storage trouble
// or a bug, which each door answers its own way.
func Refusal(err error) (de *Error, ok bool) {
	if errors.As(err, &de) {
		return de, true
	}
	if errors.Is(err, store.ErrThreadQueueFull) {
		return QueueFull(err), true
	}
	if de := badText(err); de != nil {
		return de, true
	}
	return nil, false
}

// badText is the refusal of an id or text that PostgreSQL's text type
// cannot hold — a NUL character (SQLSTATE 22P05 from a JSON escape, 22021
// otherwise) or bytes that are not UTF-8 (22021). No stored id can hold
// one, so for a look-up it says nothing about what exists.
//
// So are JSON values jsonb cannot hold, in a bag kept with the thread it
// opens: a lone surrogate escape (22P02; Go reads it as U+FFFD, jsonb
// refuses it) or a number past numeric's range (22003). The doors write
// no other value that PostgreSQL parses, so these are the caller's.
func badText(err error) *Error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch pgErr.Code {
	case "22021", "22P05":
		return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest,
			Message: "an id or text in the request holds a NUL character or bytes that are not UTF-8", Err: err}
	case "22P02", "22003":
		return &Error{Status: http.StatusBadRequest, Code: CodeBadRequest,
			Message: "a JSON value in the request cannot be stored: a lone surrogate escape (\\ud800-\\udfff) or a number out of range", Err: err}
	}
	return nil
}

// SchemaTrouble reports whether err is PostgreSQL saying a table, column,
// function or type a door's query names does not exist. The doors name
// only what their migrations made, so this is a database whose schema was
// stepped down under a door warm before (its SchemaGate passed): such a
// request is answered as a door started cold over that schema answers
// every request, NotMigrated, not as a failing of funduq's own (design.md
// §The doors, "The doors need the migrated schema"). Each door maps it
// before storage trouble and the 500.
func SchemaTrouble(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P01", "42703", "42883", "42704": // undefined table, column, function, object
		return true
	}
	return false
}

// QueueFull is the refusal of a run whose thread has too many runs waiting
// (config DoorLimits.MaxQueuedPerThread): 429 with Retry-After.
func QueueFull(err error) *Error {
	return &Error{Status: http.StatusTooManyRequests, Code: CodeThreadQueueFull,
		Message: "the thread has too many runs waiting for its agent; retry later", RetryAfter: 5, Err: err}
}

// WriteJSON writes v as compact JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) { apierr.WriteJSON(w, status, v) }

// CallerGone reports that err is the request's own context ending: the
// caller hung up mid-request (an SSE client closing, a load tool's phase
// ending). Not funduq's fault, so not logged as an error, nor as storage
// being out of reach (pgx calls a query that finds its context already
// done a timeout, safe to retry); the caller hears nothing either way.
// What was written before it stands: a run admitted before the caller
// left goes on as any other.
func CallerGone(r *http.Request, err error) bool {
	return errors.Is(r.Context().Err(), context.Canceled) && errors.Is(err, context.Canceled)
}

// LogCallerGone logs a request whose caller went away mid-request
// (CallerGone), at Info: one line an operator can tell from funduq's own
// failures.
func LogCallerGone(log *slog.Logger, r *http.Request, err error) {
	log.InfoContext(r.Context(), "caller went away", "method", r.Method, "path", r.URL.Path, "err", err.Error())
}

// Unavailable reports whether err means shared storage could not be reached
// in time (a dial or connect failure, a connection lost, or the door's own
// storage deadline passing), or stayed contended past the store's retries,
// rather than a refusal or a bug.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	// The connection ended under the call (its socket closed with no
	// message: a backend killed, a proxy or route cut, a failover): pgx
	// says only "unexpected EOF", which is no driver's refusal of the
	// query but storage gone away — 503, not a 500 saying funduq failed.
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 (connection exception), 53 (insufficient resources),
		// 57P0x (server shutting down / cannot connect now); and a
		// serialization failure or deadlock (40001, 40P01) still there
		// after the store's retries (D13: three attempts): transient, the
		// transaction rolled back, so the caller may retry as after any
		// other storage trouble — not a 500 saying funduq failed.
		c := pgErr.Code
		return len(c) == 5 && (c[:2] == "08" || c[:2] == "53" || c[:4] == "57P0" || c == "40001" || c == "40P01")
	}
	return pgconn.SafeToRetry(err)
}
