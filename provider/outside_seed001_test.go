package provider

import (
	"context"
	"slices"
	"testing"
)

// Seed 001, "Finish asking": a round that ends RUN_FINISHED with a tool
// call nobody answered has finished asking, and funduq pauses it as it
// pauses an interrupt outcome (design.md §The status machine) and may
// reopen it with the caller's tool result. So the SDK treats such a round
// as paused too: after a reconnect it is not announced (its stale report
// could answer the new round) but resent before register, as
// TestPausedRunIsNotAnnouncedAfterReconnect has it for an interrupt.
func TestOutsideSeed001ToolCallRoundIsResentAsPaused(t *testing.T) {
	f := newFakeFunduq(t)
	g := newGates()
	ask := Agent{Name: "a", Handler: func(ctx context.Context, run *Run) error {
		g.started <- run
		for _, ev := range []map[string]any{
			{"type": "TOOL_CALL_START", "toolCallId": "tc1", "toolCallName": "pick_color"},
			{"type": "TOOL_CALL_END", "toolCallId": "tc1"},
			{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID},
		} {
			if err := run.Emit(ctx, ev); err != nil {
				return err
			}
		}
		return nil
	}}
	c, _ := startClient(t, baseConfig(t, f, ask))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	g.waitStarted(t)
	round := []string{"event r-1 #1 TOOL_CALL_START", "event r-1 #2 TOOL_CALL_END", "event r-1 #3 RUN_FINISHED", "finish r-1"}
	expectFrames(t, p1, round...)
	p1.drop()
	p2 := f.registeredPeer(t)
	if got := p2.earlyFrames(t); !slices.Equal(got, round) {
		t.Fatalf("sent %q before register, want the paused round %q", got, round)
	}
	p2.send(t, runFrame("r-1", "a", "t-1", "hi"))
	expectFrames(t, p2, append([]string{"ack r-1 true"}, round...)...)
	noStart(t, c, g, "r-1")
}
