package main

import (
	"os"
	"testing"
	"time"
)

// A process's CPU reads to well under a 10 ms tick: a short phase on a
// busy machine must not read a process that worked as idle
// (TestGrowthOfABuild once read the doors at 0 ms for 9 runs). The
// reading of this process sits between two of its own getrusage readings,
// which count in microseconds.
func TestProcCPUIsFinerThanATick(t *testing.T) {
	for i := range 20 {
		for start := selfCPU(); selfCPU()-start < 3*time.Millisecond; { // work a little
		}
		before := selfCPU()
		got, ok := procCPU(os.Getpid())
		after := selfCPU()
		if !ok {
			t.Fatal("could not read this process's CPU")
		}
		if got < before-time.Millisecond || got > after+time.Millisecond {
			t.Fatalf("reading %d: procCPU %v, getrusage %v..%v: off by more than 1 ms", i, got, before, after)
		}
	}
}
