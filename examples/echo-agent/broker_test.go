package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	runstatus "github.com/funduq/funduq-go/core/run"
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
