package provider

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// funduq closes the link (1009) as soon as it reads the header of a frame
// too large to read, while the client may still be writing that frame:
// its writer is blocked on a socket funduq no longer reads. The run ended
// in the frame's place must be the one that emitted it, under the seq of
// the oversized event. Counting only the frames whose write had returned,
// the client replaced an earlier, stored event instead (here RUN_STARTED,
// and with several runs possibly another run's), which funduq refuses as
// another event under a taken seq, and resent the oversized event on the
// next link, closing it again.
func TestEventTooLargeBeingWrittenIsTheOneReplaced(t *testing.T) {
	f := newFakeFunduq(t)
	hold := make(chan struct{})
	f.setHooks(func(f *fakeFunduq) {
		f.afterRegister = func(n int, p *peer) bool {
			if n == 1 {
				p.conn.SetReadLimit(64 << 10) // gorilla answers 1009 on the header
			}
			return false
		}
		f.readFailed = func(n int, p *peer, err error) {
			if n == 1 {
				<-hold // the connection stays open, unread: the write blocks
			}
		}
	})
	defer close(hold)
	cause := make(chan error, 1)
	h := func(ctx context.Context, run *Run) error {
		if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
			return err
		}
		// More than the socket buffers of a peer that stopped reading hold
		// (the sender's is at most 4 MiB on Linux by default).
		if err := run.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "blob", "value": strings.Repeat("x", 8<<20)}); err != nil {
			return err
		}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return context.Cause(ctx)
	}
	startClient(t, baseConfig(t, f, Agent{Name: "a", Handler: h}))
	p1 := f.registeredPeer(t)
	p1.send(t, runFrame("r-1", "a", "t-1", "hi"))
	p1.expectAck(t, "r-1")
	p1.expectEvent(t, "r-1", 1)

	// Encoding and writing megabytes under the race detector on a loaded
	// machine can outlast the fake's guard: a minute before calling a hang.
	var p2 *peer
	select {
	case p2 = <-f.peers:
	case <-time.After(time.Minute):
		t.Fatal("the client did not come back after the 1009")
	}
	if p2.err != nil || p2.register == nil {
		t.Fatalf("peer %d: handshake failed: %v", p2.n, p2.err)
	}
	expectFrames(t, p2,
		"ack r-1 true",
		"event r-1 #1 RUN_STARTED", // resent as it was stored
		"event r-1 #2 RUN_ERROR",   // in the oversized event's place
		"finish r-1",
	)
	if err := <-cause; !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("the handler's context ended with %v, want ErrEventTooLarge", err)
	}
}
