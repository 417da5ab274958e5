package store

import (
	"errors"
	"fmt"

	"github.com/funduq/funduq-go/core/run"
)

// ErrNotFound: the row a write or read names does not exist.
var ErrNotFound = errors.New("not found")

// ErrIllegalTransition is matched (errors.Is) by every *TransitionError.
var ErrIllegalTransition = errors.New("illegal status transition")

// ErrStaleEpoch is matched (errors.Is) by every *StaleEpochError.
var ErrStaleEpoch = errors.New("stale broker epoch")

// TransitionError reports a status write that did not apply because the run
// was not in a status the write may move it from. Nothing was changed.
type TransitionError struct {
	RunID  string
	From   run.Status // the status the run was found in
	To     run.Status
	Writer run.Writer
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("run %s: %s may not move it from %s to %s", e.RunID, e.Writer, e.From, e.To)
}

func (e *TransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// StaleEpochError reports a broker write refused because the writer no longer
// leads: the epoch in broker_leader moved past the one it wrote under.
// Nothing was changed; the writer must stop acting as leader.
type StaleEpochError struct {
	Have    int64 // the epoch the writer named
	Current int64 // the epoch in the database
}

func (e *StaleEpochError) Error() string {
	return fmt.Sprintf("broker epoch %d is stale: the leader epoch is now %d", e.Have, e.Current)
}

func (e *StaleEpochError) Is(target error) bool { return target == ErrStaleEpoch }
