package node_test

import (
	"log/slog"
	"testing"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// An operator's walk-through: a node told to stop (SIGTERM, a graceful
// shutdown) closes its providers' links itself, telling them to reconnect.
// Its log must not say those links were lost, as it says of a link whose
// provider dropped without a goodbye: before the fix both read
// "provider link ended" with "lost": true, and an operator looking for
// providers that fell over found every provider of a routine restart.
func TestNodeStopDoesNotLogItsLinksLost(t *testing.T) {
	logs := &syncbuf.Buffer{}
	h := nodetest.StartWith(t, nil, func(o *node.Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	dropped := h.Connect(0xa1, nil)
	dropped.Register("echo")
	stayed := h.Connect(0xa2, nil)
	stayed.Register("other")
	stayed.Barrier()

	ended := func(key string) map[string]any {
		for _, r := range logs.Records() {
			if r["msg"] == "provider link ended" && r["provider_key"] == key {
				return r
			}
		}
		return nil
	}
	dropped.Close() // no close frame: the provider's side fell over
	h.Eventually("the dropped link's end is logged", func() bool { return ended(dropped.Key) != nil })
	h.Shutdown() // returns once every link has ended and logged it

	if r := ended(dropped.Key); r["lost"] != true {
		t.Errorf("a link its provider dropped logged %v; want \"lost\": true", r)
	}
	r := ended(stayed.Key)
	if r == nil {
		t.Fatalf("the link the node closed as it stopped logged no end; logs:\n%s", logs.String())
	}
	if r["lost"] != false || r["reason"] != "funduq broker node stopped leading; reconnect" {
		t.Errorf("the link the node closed as it stopped logged %v; want \"lost\": false with the node's reason", r)
	}
}
