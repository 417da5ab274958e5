package procstack

import (
	"os/exec"
	"syscall"
	"testing"
)

// allStopped tells a stopped process from a running one: Freeze's barrier.
func TestAllStopped(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	if allStopped(pid) {
		t.Fatal("a running process reads as stopped")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	p.waitStopped()
	if !allStopped(pid) {
		t.Fatal("a process sent SIGSTOP does not read as stopped")
	}
}
