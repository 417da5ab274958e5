package identity

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every refusal from this package wraps exactly one of these
// (a presenter refusal additionally wraps the cause, e.g. ErrStale), so callers
// choose a status with errors.Is and still get a message saying why.
var (
	// ErrBadKey: a key or seed is not in its canonical hex form.
	ErrBadKey = errors.New("identity: bad key")
	// ErrBadSignature: a signature is malformed or does not verify.
	ErrBadSignature = errors.New("identity: bad signature")
	// ErrStale: a signed timestamp is outside the freshness window.
	ErrStale = errors.New("identity: stale timestamp")
	// ErrInvalidChain: an actor chain (or a hop about to be signed) breaks a chain rule.
	ErrInvalidChain = errors.New("identity: invalid actor chain")
	// ErrBadToken: a KYOK token is malformed, forged or lacks a claim.
	ErrBadToken = errors.New("identity: bad kyok token")
	// ErrTokenExpired: a genuine KYOK token whose exp has passed.
	ErrTokenExpired = errors.New("identity: kyok token expired")
	// ErrBadPresenter: a Funduq-Presenter header that proves nothing.
	ErrBadPresenter = errors.New("identity: bad presenter proof")
	// ErrBadView: a view proof (the doors' Funduq-View header) that proves nothing.
	ErrBadView = errors.New("identity: bad view proof")
)

// ChainError says which hop of an actor chain was refused and why. It matches
// ErrInvalidChain under errors.Is and unwraps to the underlying cause, if any
// (for example ErrBadKey or ErrBadSignature).
type ChainError struct {
	Hop    int    // zero-based hop index; -1 when the chain as a whole is refused
	Reason string // human-readable rule that failed
	Err    error  // underlying cause, may be nil
}

func (e *ChainError) Error() string {
	msg := ErrInvalidChain.Error()
	if e.Hop >= 0 {
		msg += fmt.Sprintf(": hop %d", e.Hop)
	}
	msg += ": " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes every ChainError match ErrInvalidChain.
func (e *ChainError) Is(target error) bool { return target == ErrInvalidChain }

// Unwrap exposes the underlying cause.
func (e *ChainError) Unwrap() error { return e.Err }
