package provider_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// panicky panics when marshalled: an author's event type with a broken
// MarshalJSON.
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("broken MarshalJSON") }

// An event whose MarshalJSON panics, emitted from the handler, ends the
// run as a handler panic does (a RUN_ERROR "handler panicked: …"), and the
// client goes on serving.
func TestOutsidePanicInsideEmit(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x5a)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		if r.LastUserText() == "panic" {
			return r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "x", "value": panicky{}})
		}
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	id, _ := h.Door(s.PublicKeyHex(), "a", "", "panic")
	h.WaitStatus(id, run.Failed)
	evs := h.Events(id)
	if last := evs[len(evs)-1]; last["type"] != "RUN_ERROR" || !strings.Contains(last["message"].(string), "handler panicked") {
		t.Fatalf("events %v", evs)
	}
	id2, _ := h.Door(s.PublicKeyHex(), "a", "", "fine")
	h.WaitStatus(id2, run.Completed)
}

// A caller's cancel reaches the handler as its context's cause
// (ErrCancelRequested); what it emits after it is still stored (a cancel is
// a request), and the run ends cancelled once the handler returns.
func TestOutsideCancelReachesTheHandler(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x5d)
	cause := make(chan error, 1)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		if err := r.EmitText(context.Background(), "bye", "stopping"); err != nil {
			return err
		}
		return ctx.Err()
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	id, _ := h.Door(s.PublicKeyHex(), "a", "", "long")
	h.Eventually("RUN_STARTED stored", func() bool { return len(h.Events(id)) == 1 })
	if _, err := h.Store.RequestCancel(context.Background(), id, "test"); err != nil {
		t.Fatal(err)
	}
	if got := <-cause; !errors.Is(got, provider.ErrCancelRequested) {
		t.Fatalf("handler's context cause = %v, want ErrCancelRequested", got)
	}
	h.WaitStatus(id, run.Cancelled)
	var types []string
	for _, e := range h.Events(id) {
		types = append(types, e["type"].(string))
	}
	if strings.Join(types, " ") != "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END RUN_ERROR" {
		t.Fatalf("stored %v", types)
	}
}
