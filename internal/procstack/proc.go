package procstack

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kind is what a process serves.
type Kind string

// The kinds a Stack starts; a Spec may name another.
const (
	KindBroker   Kind = "broker"
	KindDoor     Kind = "door"
	KindProvider Kind = "provider"
)

// Spec is one process to start.
type Spec struct {
	Name string // unique among the stack's current processes; names the log
	Kind Kind
	Path string
	Args []string
	Env  []string // after Config.Env
	// The process listens on a free loopback port picked at start, told to
	// it through the environment variable AddrEnv and/or the flag AddrFlag
	// (e.g. FUNDUQ_HTTP_ADDR, or -addr). Ready is the HTTP path that
	// answers 200 once it serves ("" when it listens nowhere).
	AddrEnv  string
	AddrFlag string
	Ready    string
}

// Proc is one incarnation of a started process. Its waiter goroutine is
// the one owner of the OS process: it reaps it and closes Done.
type Proc struct {
	Name        string
	Kind        Kind
	URL         string // http://127.0.0.1:port ("" when it listens nowhere)
	LogPath     string
	Incarnation int // 1, then 2, … after each Restart

	spec Spec
	cmd  *exec.Cmd
	done chan struct{}

	mu     sync.Mutex
	frozen bool
}

// String is the name, with the incarnation after a restart.
func (p *Proc) String() string {
	if p.Incarnation > 1 {
		return fmt.Sprintf("%s#%d", p.Name, p.Incarnation)
	}
	return p.Name
}

// PID is the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Alive reports whether the process has not exited yet.
func (p *Proc) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// ExitCode is the exit status once the process has exited (-1 when a
// signal ended it), or -1 while it runs.
func (p *Proc) ExitCode() int {
	if p.Alive() {
		return -1
	}
	return p.cmd.ProcessState.ExitCode()
}

// Signal sends sig unless the process has exited (then it does nothing:
// its pid may belong to another process by now).
func (p *Proc) Signal(sig syscall.Signal) {
	if p.Alive() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Wait returns nil once the process has exited, or the context's error.
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return &ProcError{Proc: p.String(), Op: "stop", Log: p.LogPath, Err: context.Cause(ctx)}
	}
}

// Kill is SIGKILL (no clean-up of any kind) and waits for the exit.
func (p *Proc) Kill(ctx context.Context) error {
	// No SIGCONT first: a stopped process dies of SIGKILL as it is,
	// without a moment awake.
	p.Signal(syscall.SIGKILL)
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
	return p.Wait(ctx)
}

// Term is SIGTERM (a broker node hands its lease over) and waits for the
// exit.
func (p *Proc) Term(ctx context.Context) error {
	p.Signal(syscall.SIGTERM)
	return p.Wait(ctx)
}

// Freeze is SIGSTOP: the process holds its sockets and answers nothing.
// A frozen broker node is never taken for the leader.
func (p *Proc) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
	p.Signal(syscall.SIGSTOP)
	p.waitStopped()
}

// waitStopped returns once every thread of the process is stopped (state T
// in /proc/<pid>/task/*/stat), or it has exited. kill returns as soon as
// SIGSTOP is queued, and on a busy machine a thread may run on for a while:
// a frame sent to the process right after Freeze could still be read and
// acted on, which a test of a frozen node must rule out.
func (p *Proc) waitStopped() {
	deadline := time.Now().Add(5 * time.Second)
	for p.Alive() && !allStopped(p.PID()) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// allStopped reports whether every thread of pid is stopped; false when
// that cannot be read.
func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name's closing parenthesis.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}

// Thaw is SIGCONT after Freeze.
func (p *Proc) Thaw() {
	p.mu.Lock()
	was := p.frozen
	p.frozen = false
	p.mu.Unlock()
	if was {
		p.Signal(syscall.SIGCONT)
	}
}

// Frozen reports whether Freeze was the last of Freeze and Thaw.
func (p *Proc) Frozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// stop ends the process for Close: thawed and SIGTERM within grace (when
// grace > 0), then SIGKILL, and returns once it has exited.
func (p *Proc) stop(grace time.Duration) {
	if grace > 0 {
		p.Thaw() // to hear SIGTERM
		p.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-p.done:
			return
		case <-t.C:
		}
	}
	p.Signal(syscall.SIGKILL)
	p.mu.Lock()
	p.frozen = false
	p.mu.Unlock()
	<-p.done // SIGKILL cannot be caught: the waiter reaps it
}

// Log is the process's output so far.
func (p *Proc) Log() string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// Tail is the last n lines of the log, without debug records; see
// TailFile.
func (p *Proc) Tail(n int) string { return TailFile(p.LogPath, n) }

// Grep is the log lines containing s.
func (p *Proc) Grep(s string) string {
	b, _ := os.ReadFile(p.LogPath)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TailFile is the last n lines of a process's log at path, without debug
// records (the JSON handler's "level":"DEBUG"), to say why it failed; a
// *ProcError names the path.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if !strings.Contains(l, `"level":"DEBUG"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
