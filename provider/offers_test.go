package provider

import (
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

func wantVerdict(t *testing.T, a wire.Ack, want wire.Verdict, reasonPrefix string) {
	t.Helper()
	got, reason := a.Verdict()
	if got != want {
		t.Fatalf("ack for %s: %v, want %v", a.RunID, got, want)
	}
	if a.Accepted == nil {
		t.Fatalf("ack for %s leaves accepted out", a.RunID)
	}
	switch want {
	case wire.Refused:
		if !strings.HasPrefix(reason, reasonPrefix) {
			t.Fatalf("refusal reason %q, want prefix %q", reason, reasonPrefix)
		}
	default:
		if a.Reason != nil {
			t.Fatalf("ack for %s carries reason %q", a.RunID, *a.Reason)
		}
	}
}

func TestOfferVerdicts(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	cfg := baseConfig(t, f, echoAgent(g))
	cfg.MaxConcurrentRuns = intp(1)
	startClient(t, cfg)
	p := f.registeredPeer(t)

	// An agent this client does not serve: refused, with a reason.
	p.send(t, runFrame("r-stranger", "nope", "t-0", "hi"))
	wantVerdict(t, p.expectAck(t, "r-stranger"), wire.Refused, `agent "nope" is not served by this provider`)

	// Room for one: accepted at once, before the handler does anything.
	p.send(t, runFrame("r-1", "echo", "t-1", "hello there"))
	wantVerdict(t, p.expectAck(t, "r-1"), wire.Accepted, "")
	run := g.waitStarted(t)
	if run.ID != "r-1" || run.ThreadID != "t-1" || run.AgentName != "echo" || run.LastUserText() != "hello there" {
		t.Fatalf("run %+v", run)
	}

	// Full: declined, no reason.
	p.send(t, runFrame("r-2", "echo", "t-2", "hi"))
	wantVerdict(t, p.expectAck(t, "r-2"), wire.Declined, "")

	// Frames that do not validate: refused with the reason, full or not.
	const refusal = "frame does not validate as a DeliveredRun: "
	for i, frame := range []string{
		`{"type":"run","runId":"bad-1","agentName":"echo","threadId":"t","metadata":{},"runInput":{},"extra":1}`,
		`{"type":"run","runId":"bad-2","agentName":"echo","threadId":"t","runInput":{}}`,
		`{"type":"run","runId":"bad-3","agentName":"echo","threadId":"t","metadata":{},"runInput":"not an object"}`,
		`{"type":"run","runId":"bad-4","agentName":"echo","threadId":7,"metadata":{},"runInput":{}}`,
		`{"type":"run","runId":"bad-5","agentName":"","threadId":"t","metadata":{},"runInput":{}}`,
	} {
		p.sendRaw(t, frame)
		wantVerdict(t, p.expectAck(t, fmt.Sprintf("bad-%d", i+1)), wire.Refused, refusal)
	}
	// Without a runId there is nothing to answer; the next ack is the next run's.
	p.sendRaw(t, `{"type":"run","agentName":"echo","threadId":"t","metadata":{},"runInput":{}}`)

	p.send(t, runFrame("r-3", "echo", "t-3", "hi"))
	wantVerdict(t, p.expectAck(t, "r-3"), wire.Declined, "")

	// The run ends: finish frees the place, and the next offer is accepted.
	g.release("r-1")
	p.expectFinish(t, "r-1")
	p.send(t, runFrame("r-4", "echo", "t-4", "hi"))
	wantVerdict(t, p.expectAck(t, "r-4"), wire.Accepted, "")
	if r := g.waitStarted(t); r.ID != "r-4" {
		t.Fatalf("started %s", r.ID)
	}
	g.release("r-4")
	p.expectFinish(t, "r-4")
}

func TestUnlimitedNeverDeclines(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	startClient(t, baseConfig(t, f, echoAgent(g)))
	p := f.registeredPeer(t)
	if p.hello.MaxConcurrentRuns != nil {
		t.Fatalf("unlimited client declared %d", *p.hello.MaxConcurrentRuns)
	}
	const n = 64
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		p.send(t, runFrame(id, "echo", fmt.Sprintf("t-%d", i%3), "hi"))
		wantVerdict(t, p.expectAck(t, id), wire.Accepted, "")
	}
	for range n {
		g.waitStarted(t)
	}
	for i := range n {
		g.release(fmt.Sprintf("r-%d", i))
	}
	finished := make(map[string]bool)
	for range n {
		m := p.expect(t, wire.TypeFinish)
		finished[m["runId"].(string)] = true
	}
	if len(finished) != n {
		t.Fatalf("%d distinct finishes, want %d", len(finished), n)
	}
}

func TestReofferedRunIsAcceptedAgainNotRunTwice(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	cfg := baseConfig(t, f, echoAgent(g))
	cfg.MaxConcurrentRuns = intp(1)
	startClient(t, cfg)
	p := f.registeredPeer(t)

	p.send(t, runFrame("r-1", "echo", "t-1", "hi"))
	wantVerdict(t, p.expectAck(t, "r-1"), wire.Accepted, "")
	g.waitStarted(t)
	// Offered again while held (a broker that took over re-offers what it
	// found offering): the same answer, even though the client is full.
	p.send(t, runFrame("r-1", "echo", "t-1", "hi"))
	wantVerdict(t, p.expectAck(t, "r-1"), wire.Accepted, "")
	g.release("r-1")
	p.expectFinish(t, "r-1")
	select {
	case r := <-g.started:
		t.Fatalf("handler started twice (%s)", r.ID)
	default:
	}
}
