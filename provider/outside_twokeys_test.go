package provider_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/internal/syncbuf"
	"github.com/funduq/funduq-go/provider"
)

// Two processes of one key, the newer serving a subset of the older's
// agents (a deploy that drops agent y, or a key split across processes):
// x moves to the newer, y stays with the older, which funduq tells that x
// was taken. Then the older's link drops and it reconnects: it registers
// its roster less x, so the newer keeps x and keeps running ("the newer
// wins for good", design.md §Two processes of one key); the older keeps
// serving y. It registered its whole roster again, which took x back, left
// the newer serving nothing, told replaced, and stopped for good (Run
// returned ErrReplaced): a blip of the older process ended the newer one.
// When the newer then leaves, funduq says x is free, and the older, which
// still declares it, serves it again.
func TestOutsideOlderProcessReconnectKeepsNewerSubset(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.LinkGrace = 5 * time.Second })
	proxy := newCutter(t, strings.TrimPrefix(h.URL, "http://"))
	s := outsideSigner(t, 0x59)
	served := make(chan string, 8)
	agent := func(name, who string) provider.Agent {
		return provider.Agent{Name: name, Handler: func(ctx context.Context, r *provider.Run) error {
			served <- who + "/" + name
			if err := started(ctx, r); err != nil {
				return err
			}
			return finished(ctx, r)
		}}
	}
	var oldLogs syncbuf.Buffer
	cfgOld := outsideConfig(h, s, slog.New(slog.NewJSONHandler(&oldLogs, nil)), agent("x", "old"), agent("y", "old"))
	cfgOld.BaseURL = proxy.url()
	older, err := provider.New(cfgOld)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, older)
	newer, err := provider.New(outsideConfig(h, s, nil, agent("x", "new")))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	newerDone := make(chan error, 1)
	go func() { newerDone <- newer.Run(ctx) }()
	var newerErr error
	newerStopped := false
	stopNewer := func() error {
		if !newerStopped {
			cancel()
			newerErr, newerStopped = <-newerDone, true
		}
		return newerErr
	}
	t.Cleanup(func() { _ = stopNewer() })
	<-newer.Ready()

	check := func(when string) {
		t.Helper()
		for _, name := range []string{"x", "y"} {
			id, _ := h.Door(s.PublicKeyHex(), name, "", "hi")
			h.WaitStatus(id, run.Completed)
			got := <-served
			want := map[string]string{"x": "new/x", "y": "old/y"}[name]
			if got != want {
				t.Errorf("%s: run of %s served by %s, want %s", when, name, got, want)
			}
		}
	}
	check("before the cut")

	proxy.cut()
	h.Eventually("the older registers again", func() bool {
		return bytes.Count(oldLogs.Bytes(), []byte(`"msg":"provider registered"`)) == 2
	})
	h.Settle()
	check("after the older reconnected")
	if err := stopNewer(); err != nil {
		t.Fatalf("the newer process's Run = %v, want nil (it was never replaced)", err)
	}

	// The newer process leaves (its shutdown takes x out of service): x is
	// free again, funduq says so, and the older, which still declares x,
	// registers it again on the link it has.
	h.Eventually("the older serves x again", func() bool {
		for _, ref := range h.Node.Broker.Snapshot().Served {
			if ref.Key == s.PublicKeyHex() && ref.Name == "x" {
				return true
			}
		}
		return false
	})
	id, _ := h.Door(s.PublicKeyHex(), "x", "", "hi")
	h.WaitStatus(id, run.Completed)
	if got := <-served; got != "old/x" {
		t.Errorf("after the newer left: run of x served by %s, want old/x", got)
	}
}
