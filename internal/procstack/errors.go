package procstack

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by a Stack's Start methods once Close has begun:
// a process started then would have no owner to stop it.
var ErrClosed = errors.New("procstack: the stack is closed")

// ErrExited is the cause of a *ProcError when the process exited before it
// was ready.
var ErrExited = errors.New("exited")

// ErrNoLeader is returned by WaitLeader when the context ends before a
// broker node (other than those excluded) answers /readyz as the leader.
var ErrNoLeader = errors.New("procstack: no leader")

// ErrRunning is returned by Restart for a process that has not exited.
var ErrRunning = errors.New("procstack: the process is still running")

// ConfigError is a Config or Spec field that cannot work.
type ConfigError struct {
	Field   string // e.g. "RedisPrefix" or "Spec.Path"
	Problem string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("procstack: config %s: %s", e.Field, e.Problem)
}

// ProcError is a process that could not be started, did not become ready
// or did not stop. Log is where its output went.
type ProcError struct {
	Proc string // name, with the incarnation after a restart (n1#2)
	Op   string // "start", "ready" or "stop"
	Log  string
	Err  error // ErrExited, a context error, or the OS's
}

func (e *ProcError) Error() string {
	return fmt.Sprintf("procstack: %s %s: %v (log %s)", e.Op, e.Proc, e.Err, e.Log)
}

func (e *ProcError) Unwrap() error { return e.Err }

// BuildError is a binary that did not compile.
type BuildError struct {
	Package string
	Output  string // go build's combined output
	Err     error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("procstack: go build %s: %v\n%s", e.Package, e.Err, e.Output)
}

func (e *BuildError) Unwrap() error { return e.Err }
