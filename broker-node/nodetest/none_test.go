package nodetest

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.MainWithPools(m) }

// fatals records a Fatalf instead of failing the test, so a test can
// assert that a helper fails.
type fatals struct {
	testing.TB
	msg string
}

func (f *fatals) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// None fails on a frame the broker wrote before it, even one still in
// flight when None is called: here the offer of a run that reached
// offering a moment ago, not yet read by the test.
func TestNoneSeesAFrameStillInFlight(t *testing.T) {
	h := Start(t, nil)
	p := h.Connect(1, nil)
	p.Register("echo")
	runID, thread := h.Door(p.Key, "echo", "", "hi")
	h.WaitStatus(runID, run.Offering)

	rec := &fatals{TB: t}
	p.t = rec
	done := make(chan struct{})
	go func() { defer close(done); p.None() }()
	<-done
	p.t = t
	if rec.msg == "" {
		t.Fatal("None passed with an offer on the link")
	}
	p.Accept(runID) // the offer None saw was the real one; it read its barrier's answer too
	p.Complete(runID, thread)
	h.WaitStatus(runID, run.Completed)
	p.None() // and after the run, nothing more
}
