package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// funduq reads every provider frame strictly (core/strictjson: no
// repeated key, at most 64 levels of nesting, the event one level inside
// its frame) and fails the run over an event that breaks it ("provider
// sent a malformed AG-UI event"). Emit refuses such an event at the call
// (ErrInvalidEvent), as it does what the AG-UI check refuses, and the run
// goes on; an event at the deepest nesting funduq reads is sent and stored.
func TestOutsideEmitRefusesWhatFunduqsFrameCheckRefuses(t *testing.T) {
	h := nodetest.Start(t, nil)
	s := outsideSigner(t, 0x4b)
	nested := func(levels int) string {
		return `{"type":"CUSTOM","name":"d","value":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + `}`
	}
	cases := map[string]struct {
		event string
		ok    bool
	}{
		"repeated key": {`{"type":"CUSTOM","name":"a","name":"b","value":1}`, false},
		"too deep":     {nested(63), false}, // 64 levels in the event, 65 in its frame
		"deepest":      {nested(62), true},
	}
	emitted := make(chan error, 1)
	c, err := provider.New(outsideConfig(h, s, nil, provider.Agent{Name: "a", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		emitted <- r.Emit(ctx, json.RawMessage(cases[r.LastUserText()].event))
		return finished(ctx, r)
	}}))
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	for name, tc := range cases {
		id, _ := h.Door(s.PublicKeyHex(), "a", "", name)
		err := <-emitted
		h.Eventually("run "+id+" ends", func() bool { return h.Run(id).Status.Terminal() })
		r := h.Run(id)
		if r.Status != run.Completed {
			t.Errorf("%s: Emit = %v, and the run %s (%s), want completed", name, err, r.Status, r.FailureReason)
		}
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, provider.ErrInvalidEvent) {
			t.Errorf("%s: Emit = %v, want ok=%v (or ErrInvalidEvent)", name, err, tc.ok)
		}
		if want := map[bool]int{true: 3, false: 2}[tc.ok]; len(h.Events(id)) != want {
			t.Errorf("%s: %d events stored, want %d", name, len(h.Events(id)), want)
		}
	}
}
