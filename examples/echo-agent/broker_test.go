package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	runstatus "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// The example agent, against a real broker node over real WebSockets,
// answers a run inserted the way a door inserts it.
func TestEchoAgentAnswersADoorRun(t *testing.T) {
	h := nodetest.Start(t, nil)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "echo.key")
	env := map[string]string{
		"FUNDUQ_BROKER_URL":     h.URL,
		"FUNDUQ_AGENT_KEY_FILE": keyFile,
		"FUNDUQ_PUBLIC_KEY":     h.Node.FunduqKey(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, io.Discard, io.Discard) }()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("echo-agent exited %d", code)
		}
	}()
	var served broker.AgentRef
	h.Eventually("the echo agent registers", func() bool {
		s := h.Node.Broker.Snapshot().Served
		if len(s) == 1 {
			served = s[0]
		}
		return len(s) == 1
	})
	if served.Name != "echo" {
		t.Fatalf("served %v", served)
	}
	id, thread := h.Door(served.Key, "echo", "", "hi there")
	h.WaitStatus(id, runstatus.Completed)
	var text strings.Builder
	for _, ev := range h.Events(id) {
		if ev["type"] == "TEXT_MESSAGE_CONTENT" {
			text.WriteString(ev["delta"].(string))
		}
	}
	if text.String() != "echo: hi there" {
		t.Fatalf("answer %q", text.String())
	}
	// A second turn on the same thread is answered too.
	id2, _ := h.Door(served.Key, "echo", thread, "again")
	h.WaitStatus(id2, runstatus.Completed)
}

// A broker that refuses the echo agent's register for good (here its
// description is over the node's FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES) makes
// the process exit non-zero naming funduq's reason, rather than retry for
// ever while a supervisor shows it running.
func TestEchoAgentExitsWhenRegisterIsRefusedForGood(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxAgentDescriptionBytes = 8 })
	env := map[string]string{
		"FUNDUQ_BROKER_URL":     h.URL,
		"FUNDUQ_AGENT_KEY_FILE": filepath.Join(t.TempDir(), "echo.key"),
		"FUNDUQ_PUBLIC_KEY":     h.Node.FunduqKey(),
	}
	var stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, func(k string) string { return env[k] }, io.Discard, &stderr) }()
	// The barrier that it went on: a second refusal of its register.
	refusals := func() int { return strings.Count(stderr.String(), `"msg":"funduq refused register"`) }
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	stuck := time.NewTimer(time.Minute) // a hung test's safety net, not an assertion
	defer stuck.Stop()
wait:
	for {
		select {
		case code := <-done:
			if code == 0 {
				t.Fatalf("echo-agent exited 0; stderr:\n%s", stderr.String())
			}
			break wait
		case <-tick.C:
			if refusals() >= 2 {
				t.Fatalf("echo-agent registered again after a refusal for good; stderr:\n%s", stderr.String())
			}
		case <-stuck.C:
			t.Fatalf("echo-agent neither exited nor registered again; stderr:\n%s", stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "over the limit of 8 (FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES)") {
		t.Fatalf("stderr does not name funduq's reason:\n%s", stderr.String())
	}
}
